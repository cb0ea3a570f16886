"""Prefill/decode disaggregation settings and the KV transfer arithmetic (pure).

A request's KV moves from the prefill instance that computed it to a decode instance, as in
Splitwise (Patel et al., ISCA 2024) and DistServe (Zhong et al., OSDI 2024). Moving it takes

    transfer_s(tokens) = transfer_latency_s + tokens * kv_bytes_per_token / link bytes per s

KV bytes per token come from the model's shape: K and V, per layer, per KV head, per head
dimension, at the KV dtype's size. Llama-3-8B (config.json: 32 layers, 8 KV heads, head dim
128) in BF16: 2 * 32 * 8 * 128 * 2 B = 131072 B = 128 KiB per token.

Defaults (docs/disaggregation.md has the sources and the sensitivity):

- ``link_gbps`` 400: one 400 Gb/s NDR InfiniBand (ConnectX-7) port per GPU, the HGX
  H100/H200 network, and the per-GPU InfiniBand of Splitwise's DGX-H100 machines
  (8 x 400 Gbps per node). Prefill and decode on one NVLink domain (DistServe places them in
  one node) would be ~9x faster: NVLink 4 moves 450 GB/s = 3600 Gb/s each way per GPU.
- ``transfer_latency_ms`` 1.0: a fixed cost per transfer (a control round trip, the
  connector's handshake, the first RDMA's setup). An assumption of this model, not a
  published figure; the document shows 0 and 10 ms beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V of every layer's KV heads: 2 * layers * kv_heads * head_dim * dtype_bytes."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("dtype_bytes", dtype_bytes)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    return 2 * layers * kv_heads * head_dim * dtype_bytes


# Llama-3-8B / Llama-3.1-8B, BF16 KV (the h200-llama3-8b profile's model).
LLAMA3_8B_KV_BYTES = kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)


@dataclass(frozen=True, slots=True)
class Disaggregation:
    """A pool split into ``prefill_workers`` that only prefill (a request's first token comes
    at the end of its prefill) and ``decode_workers`` that only decode."""

    prefill_workers: int
    decode_workers: int
    link_gbps: float = 400.0  # per GPU, each way (InfiniBand NDR)
    transfer_latency_ms: float = 1.0  # fixed per transfer (assumption)
    kv_bytes_per_token: int = LLAMA3_8B_KV_BYTES
    # Sequences a decode worker runs at once; None: the profile's max_slots. KV capacity
    # bounds it too (each sequence reserves prompt + max_tokens, as on a mixed worker).
    decode_max_slots: int | None = None

    def __post_init__(self) -> None:
        if self.prefill_workers < 1 or self.decode_workers < 1:
            raise ValueError("disaggregation needs prefill_workers >= 1 and decode_workers >= 1")
        if self.link_gbps <= 0:
            raise ValueError("disaggregation link_gbps must be > 0")
        if self.transfer_latency_ms < 0:
            raise ValueError("disaggregation transfer_latency_ms must be >= 0")
        if self.kv_bytes_per_token < 1:
            raise ValueError("disaggregation kv_bytes_per_token must be >= 1")
        if self.decode_max_slots is not None and self.decode_max_slots < 1:
            raise ValueError("disaggregation decode_max_slots must be >= 1")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Disaggregation:
        known = {f.name for f in fields(cls)}
        extra = set(data) - known - {"model_shape"}
        if extra:
            raise ValueError(f"unknown disaggregation keys: {sorted(extra)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        if "model_shape" in data:  # {"layers", "kv_heads", "head_dim", "dtype_bytes"}
            if "kv_bytes_per_token" in data:
                raise ValueError("give kv_bytes_per_token or model_shape, not both")
            kwargs["kv_bytes_per_token"] = kv_bytes_per_token(**data["model_shape"])
        for key in ("prefill_workers", "decode_workers"):
            if key not in kwargs:
                raise ValueError(f"disaggregation needs {key}")
        return cls(**kwargs)

    @property
    def workers(self) -> int:
        return self.prefill_workers + self.decode_workers

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gbps * 1e9 / 8

    def wire_s(self, tokens: int) -> float:
        """Seconds the link is busy moving ``tokens`` tokens' KV."""
        return max(0, tokens) * self.kv_bytes_per_token / self.link_bytes_per_s

    def transfer_s(self, tokens: int) -> float:
        """From the start of a transfer to the KV being usable on the decode worker."""
        return self.transfer_latency_ms / 1000 + self.wire_s(tokens)
