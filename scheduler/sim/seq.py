"""What the simulator's engine model (``scheduler.sim.engine_model``) runs and reports: one
sequence's state through prefill, decode and preemption, and what one step produced."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Seq:
    job_id: str
    tenant: str
    is_realtime: bool
    arrival: float
    prompt: int  # tokens to prefill, previously generated output included on resume
    target: int  # output tokens this run produces before it finishes
    kv_need: int  # KV reserved while running: prompt + max_tokens
    prefix_key: str | None = None
    prefix_tokens: int = 0
    prefilled: int = 0
    generated: int = 0  # output tokens of this run (since the last prefill)
    done_before: int = 0  # output tokens from runs an engine-side preemption ended
    first_token: bool = False
    resumed: bool = False  # prompt includes a preempted run's context: its prefill is re-paid
    computed_before: int = 0  # KV tokens the preempted run had computed (what recompute re-pays)
    swapped_kv: int = 0  # tokens of KV waiting in this engine's CPU memory (swap mode)
    hash_ids: tuple[int, ...] = ()  # prompt blocks (traces): the block cache replaces prefix_key
    block_tokens: int = 0
    adapter: str | None = None

    @property
    def total_output(self) -> int:
        return self.done_before + self.generated

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.prompt


@dataclass(slots=True)
class StepResult:
    """What one step (or one jump of decode steps) produced."""

    start: float
    end: float
    first_tokens: list[Seq] = field(default_factory=list)
    finished: list[Seq] = field(default_factory=list)
    aborted: list[Seq] = field(default_factory=list)
    served: list[tuple[str, int, int]] = field(default_factory=list)  # tenant, in, out
    engine_preemptions: int = 0
