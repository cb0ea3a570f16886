"""Scenario files: JSON describing workers, tenants, traffic and the policies to compare.

Example::

    {"name": "rt-under-batch", "duration_s": 300, "seed": 1, "model": "smollm2",
     "workers": [{"count": 2, "profile": "cpu-smollm2-135m"}],
     "tenants": {"a": 1, "b": 2},
     "traffic": [
       {"kind": "poisson", "tenant": "a", "rate": 0.2, "prompt": 128, "max_tokens": 64,
        "slo_ttft_s": 2.0, "prefix": {"key": "sys-a", "tokens": 64}},
       {"kind": "batch", "tenant": "b", "count": 400, "window_s": 3600,
        "prompt": {"dist": "lognormal", "median": 256, "sigma": 0.8, "max": 2048},
        "output": {"dist": "lognormal", "median": 96, "sigma": 0.8}, "max_tokens": 256}],
     "policies": ["fairway", "fcfs", "vllm-priority"]}

``preemption_mode`` ("recompute", the default, or "swap") says what a preempted job's KV
becomes; ``prefix_hit_fraction`` is the share of a recompute resume's context the prefix cache
is assumed to still hold (0 by default: only a traffic ``prefix`` is cached). See
``scheduler.sim.engine_model`` for both costs.

``door_admission`` models the API's refusal at the door by predicted TTFT (the same rule,
``scheduler.outlook.door_refusal``, on the outlook the policy publishes every
``outlook_every_s``, plus the requests admitted since); policies without an outlook (FCFS,
priority) admit everything. Off by default.

``disaggregation`` splits the pool into prefill and decode workers
(``scheduler.sim.kv_transfer.Disaggregation``, run by ``scheduler.sim.disagg``;
docs/disaggregation.md). Absent by default: every worker prefills and decodes.

``lora`` gives every engine LoRA adapters (``{"max_loras": 4, "max_cpu_loras": 16,
"load_s": 0.3}``, scheduler.sim.adapters), for traffic whose generators name ``adapters``;
Fairway's ``adapter_load_s`` is then ``load_s`` unless ``fairway`` sets it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler.cost_model import CostModel
from scheduler.cost_profiles import profile
from scheduler.sim.adapters import LoraSettings
from scheduler.sim.kv_transfer import Disaggregation


@dataclass(slots=True)
class WorkerGroup:
    count: int
    profile: str
    models: tuple[str, ...]
    # CostModel fields to change from the profile, e.g. {"token_budget": 512}.
    overrides: dict[str, Any] = field(default_factory=dict)

    def cost(self) -> CostModel:
        return replace(profile(self.profile), **self.overrides)


@dataclass(slots=True)
class Scenario:
    name: str
    duration_s: float
    workers: list[WorkerGroup]
    traffic: list[dict[str, Any]]
    tenants: dict[str, float] = field(default_factory=dict)
    seed: int = 1
    model: str = "default"
    policies: list[str] = field(default_factory=lambda: ["fairway", "fcfs", "vllm-priority"])
    drain_s: float = 0.0  # keep running after the last arrival window to let work finish
    bin_s: float = 5.0  # service-curve resolution
    default_ttft_slo_s: float = 2.0
    schedule_delay_s: float = 0.002  # dispatcher reaction time after an event
    tick_s: float = 1.0
    heartbeat_progress: bool = True
    fairway: dict[str, Any] = field(default_factory=dict)  # FairwayConfig overrides
    # EngineModel options of the fairway variant's engines (Fairway's vLLM scheduler settings).
    fairway_engine: dict[str, Any] = field(default_factory=dict)
    preemption_mode: str = "recompute"  # "recompute" | "swap" (falls back where no offload)
    prefix_hit_fraction: float = 0.0  # recompute: share of a resume's context still cached
    # The API's admission at the door (service.api.slo_gate): a realtime arrival is refused
    # before the policy sees it when the last published outlook predicts it would miss.
    door_admission: bool = False
    # ... calibrated on its admitted jobs' first tokens (scheduler.ttft_calibration), as the
    # API's door is; False judges by the cost profile's prediction alone.
    door_calibration: bool = True
    # Realtime's admission mode, as a plan sets it (docs/tenancy.md): "shed" refuses a job
    # predicted to miss its TTFT target; "queue" admits it while its predicted wait before
    # its prefill starts is within ``max_queue_wait_s`` (and its deadline can be met), the
    # target then only ordering work. Applies at the door and in the policy's own check.
    door_mode: str = "shed"
    max_queue_wait_s: float = 30.0
    outlook_every_s: float = 0.1  # how often the dispatcher publishes the outlook
    # Prefill/decode disaggregation (scheduler.sim.disagg): {"prefill_workers": P,
    # "decode_workers": D, "link_gbps": ..., "transfer_latency_ms": ...}; None: mixed workers.
    disaggregation: dict[str, Any] | None = None
    lora: dict[str, Any] | None = None  # LoraSettings fields; None: engines without LoRA

    def __post_init__(self) -> None:
        lora = self.lora_settings()
        if lora is None and any(spec.get("adapters") for spec in self.traffic):
            raise ValueError("traffic names adapters: give the scenario lora settings")
        if lora is not None and self.disaggregation is not None:
            raise ValueError("lora is not modelled with disaggregation")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ValueError(
                f"preemption_mode must be 'recompute' or 'swap', got {self.preemption_mode!r}"
            )
        if not 0.0 <= self.prefix_hit_fraction < 1.0:
            raise ValueError("prefix_hit_fraction must be in [0, 1)")
        if self.door_mode not in ("shed", "queue"):
            raise ValueError(f"door_mode must be 'shed' or 'queue', not {self.door_mode!r}")
        if self.max_queue_wait_s <= 0:
            raise ValueError("max_queue_wait_s must be > 0")
        if self.disaggregation is not None:
            split = self.split()
            assert split is not None
            count = sum(g.count for g in self.workers)
            if split.workers != count:
                raise ValueError(
                    f"disaggregation: prefill_workers + decode_workers = {split.workers}, "
                    f"but the scenario has {count} workers"
                )
            if len({(g.profile, g.models) for g in self.workers}) > 1:
                raise ValueError("disaggregation needs one kind of worker (one profile, models)")

    def lora_settings(self) -> LoraSettings | None:
        return None if self.lora is None else LoraSettings.from_dict(self.lora)

    def split(self) -> Disaggregation | None:
        """The disaggregation settings, validated; None for a pool of mixed workers."""
        if self.disaggregation is None:
            return None
        return Disaggregation.from_dict(self.disaggregation)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        model = str(data.get("model", "default"))
        groups = [
            WorkerGroup(
                int(g.get("count", 1)),
                str(g["profile"]),
                tuple(g.get("models", [model])),
                {k: v for k, v in g.items() if k not in {"count", "profile", "models"}},
            )
            for g in data["workers"]
        ]
        known = {f for f in cls.__dataclass_fields__ if f not in {"workers"}}
        extra = set(data) - known - {"workers", "description"}
        if extra:
            raise ValueError(f"unknown scenario keys: {sorted(extra)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["tenants"] = {str(k): float(v) for k, v in data.get("tenants", {}).items()}
        return cls(workers=groups, **kwargs)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        return cls.from_dict(json.loads(Path(path).read_text()))
