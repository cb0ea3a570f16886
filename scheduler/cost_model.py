"""An engine's step-time model, shared by the policy (to predict) and the simulator (to run).

One engine iteration runs every decoding sequence one token forward and spends what is left of
the per-step token budget on prefill chunks (chunked prefill, as vLLM V1 does). Its time is
linear in the work it does:

    step_s = step_base_s
           + decode_per_seq_s * num_decode_seqs
           + decode_per_ctx_token_s * context tokens read by those sequences
           + prefill_per_token_s * prefill tokens in the step

The linear form is what makes the simulator's multi-step jumps exact (see ``decode_run_s``).

Preemption costs (docs/preemption.md, "Preemption modes"): a ``recompute`` victim's resume pays
the prefill of prompt + generated tokens again (``prefill_s``); a ``swap`` victim's KV goes to
CPU memory and back instead, at ``swap_per_token_s`` per token each way (``swap_s``). A profile
with ``swap_per_token_s=None`` cannot offload, and swap falls back to recompute there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler import engine_rules


@dataclass(frozen=True, slots=True)
class CostModel:
    step_base_s: float  # fixed cost of one engine iteration (weights read, launch, sampling)
    decode_per_seq_s: float  # extra cost per decoding sequence in the batch
    decode_per_ctx_token_s: float  # attention: per context token read by decoding sequences
    prefill_per_token_s: float  # cost per prompt token prefilled
    max_slots: int = 64  # concurrent sequences (vLLM max_num_seqs)
    token_budget: int = 2048  # tokens per step (vLLM max_num_batched_tokens)
    kv_capacity_tokens: int = 1_000_000
    # Seconds to move one token's KV between GPU and CPU memory, one way (KV bytes per token
    # / host link bandwidth). None: this engine cannot offload KV ("swap" -> recompute).
    swap_per_token_s: float | None = None
    # From a worker asked for to its first step: pod start and model load, the autoscaler's
    # cold start (scheduler.autoscale, the simulator's autoscaler). An assumption unless a
    # profile says it measured it: 120 s sits in the 60-180 s an 8B model takes on an H200.
    start_s: float = 120.0

    @property
    def can_swap(self) -> bool:
        return self.swap_per_token_s is not None

    def swap_s(self, tokens: int) -> float:
        """One direction (swap-out or swap-in) of ``tokens`` tokens' KV."""
        if self.swap_per_token_s is None:
            raise ValueError("this profile cannot offload KV (swap_per_token_s is None)")
        return max(0, tokens) * self.swap_per_token_s

    def step_s(self, num_decode: int, ctx_tokens: int, prefill_tokens: int) -> float:
        return (
            self.step_base_s
            + self.decode_per_seq_s * num_decode
            + self.decode_per_ctx_token_s * ctx_tokens
            + self.prefill_per_token_s * prefill_tokens
        )

    def prefill_s(self, tokens: int) -> float:
        """Time to prefill ``tokens`` alone: whole budget-sized chunks, one step each."""
        steps = max(1, math.ceil(tokens / max(1, self.token_budget)))
        return steps * self.step_base_s + tokens * self.prefill_per_token_s

    def decode_run_s(self, num_seqs: int, ctx_tokens: int, steps: int) -> float:
        """Total time of ``steps`` pure-decode steps; context grows by num_seqs each step."""
        per_step = self.step_s(num_seqs, ctx_tokens, 0)
        growth = self.decode_per_ctx_token_s * num_seqs
        return steps * per_step + growth * steps * (steps - 1) / 2

    def decode_steps_within(self, num_seqs: int, ctx_tokens: int, elapsed_s: float) -> int:
        """The number of whole decode steps that fit in ``elapsed_s`` (inverse of decode_run_s)."""
        if elapsed_s <= 0:
            return 0
        a = self.step_s(num_seqs, ctx_tokens, 0)
        b = self.decode_per_ctx_token_s * num_seqs
        if b <= 0:
            return int(elapsed_s / a) if a > 0 else 0
        # b/2 k^2 + (a - b/2) k - elapsed = 0
        lin = a - b / 2
        k = int((-lin + math.sqrt(lin * lin + 2 * b * elapsed_s)) / b)
        while k > 0 and self.decode_run_s(num_seqs, ctx_tokens, k) > elapsed_s + 1e-12:
            k -= 1
        return k

    def guard_chunk_tokens(self) -> int:
        """Batch prefill per step under the realtime guard on this engine
        (``scheduler.engine_rules.guard_chunk_tokens``: 480 on the H200 profile, 64 on CPU)."""
        return engine_rules.guard_chunk_tokens(self.step_base_s, self.prefill_per_token_s)

    def phase_period_s(self) -> float:
        """The step phase lock's period (``scheduler.step_phase``): a full batch's decode
        (``max_slots`` sequences, context reads aside) plus a guard chunk, 33 ms on the H200
        profile. Shorter periods shorten the residual a realtime arrival waits and cost batch
        throughput (docs/scheduler.md, "Step phase lock", has the sweep). 0 (no lock) where
        the chunk, the lock's only lever, is under a quarter of the period: decode work then
        varies by more than the chunk can absorb (CPU: 61 of 369 ms; locked, its realtime p99
        was no better and batch lost a point)."""
        chunk_s = self.guard_chunk_tokens() * self.prefill_per_token_s
        period = self.step_s(self.max_slots, 0, 0) + chunk_s
        return period if chunk_s >= period / 4 else 0.0

    def typical_step_s(self, batch: int, ctx_per_seq: int = 512) -> float:
        """A decode step at ``batch`` sequences of ``ctx_per_seq`` context: the TPOT guess."""
        return self.step_s(batch, batch * ctx_per_seq, 0)

    def service_s(self, prompt_tokens: int, output_tokens: int, batch: int) -> float:
        """Predicted time for one job on a worker already running ``batch`` sequences."""
        ctx = prompt_tokens + output_tokens // 2
        return self.prefill_s(prompt_tokens) + output_tokens * self.typical_step_s(
            max(1, batch), ctx
        )


DEFAULT_COST = CostModel(
    step_base_s=0.005,
    decode_per_seq_s=0.00005,
    decode_per_ctx_token_s=2.7e-8,
    prefill_per_token_s=3.2e-5,
    max_slots=256,
    token_budget=8192,
    kv_capacity_tokens=800_000,
    # Llama-3.1-8B KV is 128 KiB per token (BF16, 32 layers x 8 KV heads x 128 dims x K and
    # V). The H200's host link is PCIe Gen5 x16, 128 GB/s both ways together, so 64 GB/s one
    # way (NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/):
    # 131072 B / 64e9 B/s = 2.05 us per token. A peak figure: pinned-memory copies usually
    # reach ~80% of it, so this is the optimistic end for swap.
    swap_per_token_s=2.05e-6,
)
"""A GPU-class default (the H200 profile's numbers); the simulator's profiles module explains
where they come from. Workers should report their own."""
