"""What a new realtime job of a model would wait, as the policy sees the model's pool: the
outlook the dispatcher publishes for the API's admission, so that a request that cannot meet
its TTFT target is refused at the door in milliseconds, not queued past every target.

The prediction is the policy's own (scheduler.policies.admission.predict_ttft), split into
the pool's state (``RealtimeOutlook``, published every pass) and the jobs the API admitted
since (``extra_jobs``), so a burst that arrives between two passes is counted too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# The prediction is a mean and the target holds the tail: the door admits only below this
# share of the target (service.api.slo_gate; the simulator's door, scheduler.sim.runner).
ADMIT_BELOW = 0.7


@dataclass(frozen=True, slots=True)
class RealtimeOutlook:
    model: str
    at: float  # the policy's clock when computed (epoch seconds in the dispatcher)
    workers: int  # in the model's pool
    slots_total: int  # engine slots in the pool
    rt_load: int  # realtime jobs in flight or queued
    # Prompt tokens of realtime jobs queued, in the policy or in the engines (assigned, no
    # first token yet): the prefill a new request waits behind.
    rt_queued_prefill: int
    mean_prompt_tokens: float  # of recent realtime jobs
    job_service_s: float  # one mean realtime job's time on a worker at the pool's batch size
    step_s: float  # one engine step at the pool's batch size
    prefill_per_token_s: float
    prefill_step_s: float  # the fixed cost of each prefill chunk
    token_budget: int  # tokens per prefill chunk

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def predict_new_ttft(o: RealtimeOutlook, *, prompt_tokens: int, extra_jobs: int = 0) -> float:
    """Predicted TTFT of a new realtime job of ``prompt_tokens``, with ``extra_jobs`` admitted
    since the outlook was computed queued ahead of it."""
    ahead_tokens = o.rt_queued_prefill + extra_jobs * o.mean_prompt_tokens
    queue_s = ahead_tokens * o.prefill_per_token_s / max(1, o.workers)
    past_capacity = o.rt_load + extra_jobs + 1 - o.slots_total
    slot_wait_s = 0.0
    if past_capacity > 0:
        slot_wait_s = past_capacity * o.job_service_s / max(1, o.slots_total)
    return queue_s + slot_wait_s + _prefill_s(o, prompt_tokens) + o.step_s


def door_refusal(
    o: RealtimeOutlook, *, prompt_tokens: int, target_s: float, extra_jobs: int = 0,
    admit_below: float = ADMIT_BELOW,
) -> int | None:
    """The door's rule: None to admit, else the Retry-After seconds of a refusal. A request
    that would miss even on an idle pool is admitted: refusing it would relieve nothing."""
    predicted = predict_new_ttft(o, prompt_tokens=prompt_tokens, extra_jobs=extra_jobs)
    bar = target_s * admit_below
    if predicted > bar and alone_ttft(o, prompt_tokens=prompt_tokens) <= bar:
        return max(1, math.ceil(predicted - bar))
    return None


def alone_ttft(o: RealtimeOutlook, *, prompt_tokens: int) -> float:
    """The request's TTFT on an idle pool: a target below it cannot be met by shedding load."""
    return _prefill_s(o, prompt_tokens) + o.prefill_step_s


def _prefill_s(o: RealtimeOutlook, prompt_tokens: int) -> float:
    chunks = max(1, math.ceil(prompt_tokens / max(1, o.token_budget)))
    return chunks * o.prefill_step_s + prompt_tokens * o.prefill_per_token_s
