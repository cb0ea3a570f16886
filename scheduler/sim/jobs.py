"""One simulated request, whatever generated it (a synthetic traffic kind or a trace)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.types import JobClass


@dataclass(slots=True)
class SimJob:
    job_id: str
    tenant: str
    job_class: JobClass
    priority: int
    model: str
    arrival: float
    deadline: float | None
    prompt_tokens: int
    max_tokens: int
    output_tokens: int  # what the model will actually produce (<= max_tokens)
    weight: float = 1.0
    prefix_key: str | None = None
    prefix_tokens: int = 0
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    # Shared-prefix blocks (Mooncake-style ``hash_ids``: block i covers prompt tokens
    # [i * block_tokens, (i + 1) * block_tokens)). Empty: only ``prefix_key`` is cached.
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = 0
    adapter: str | None = None  # the LoRA adapter it runs with (traffic ``adapters``)
