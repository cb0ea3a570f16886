"""SLO-aware admission: predict a realtime job's TTFT; refuse at once if it would miss.

Prediction, for a job of model M arriving into M's pool of n workers:

    ttft = already waited
         + realtime prefill queued ahead * prefill_per_token / n   (prefills run in parallel)
         + slot wait                                               (below)
         + own prefill time
         + one decode step of the running batch                    (chunked prefill shares
                                                                    the step with decode)

Batch holds no slot against realtime (it can be preempted), so the slot wait is zero while
realtime in flight plus realtime queued fits the pool's slots. Beyond that the job waits for
realtime to finish: with p jobs ahead of it past capacity, about p * mean realtime service /
total slots. The mean realtime service is learned from finished jobs (tokens, through the
worker's cost model), so the prediction follows the workload.

Flex work is shed first: when a realtime job of M is refused, every queued flex job of M is
refused in the same pass (ahead of it in the decision list), and new flex work for M is
refused for ``overload_hold_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.cost_model import CostModel
from scheduler.policies.placement import Pool
from scheduler.types import JobView


@dataclass(slots=True)
class ServiceEstimate:
    """Running means of realtime job sizes, for the slot-wait term."""

    prompt_tokens: float = 256.0
    output_tokens: float = 128.0

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        self.prompt_tokens = 0.95 * self.prompt_tokens + 0.05 * prompt_tokens
        self.output_tokens = 0.95 * self.output_tokens + 0.05 * output_tokens

    def service_s(self, cost: CostModel, batch: int) -> float:
        return cost.service_s(int(self.prompt_tokens), int(self.output_tokens), batch)


def predict_ttft(
    job: JobView, pool: Pool, now: float, cost: CostModel, mean: ServiceEstimate
) -> float:
    n = max(1, len(pool.workers))
    batch = max(1, math.ceil(pool.mean_used()))
    ahead_tokens = max(0, pool.rt_queued_prefill - job.prompt_tokens)
    ahead_jobs = max(0, pool.rt_queued - 1)
    queue_s = ahead_tokens * cost.prefill_per_token_s / n
    past_capacity = pool.rt_inflight + ahead_jobs + 1 - pool.slots_total
    slot_wait_s = 0.0
    if past_capacity > 0:
        slot_wait_s = past_capacity * mean.service_s(cost, batch) / max(1, pool.slots_total)
    ctx = batch * (int(mean.prompt_tokens) + int(mean.output_tokens) // 2)
    step_s = cost.step_s(batch, ctx, 0)
    waited = max(0.0, now - job.arrival)
    return waited + queue_s + slot_wait_s + cost.prefill_s(job.prompt_tokens) + step_s


def retry_after_s(predicted_s: float, slo_s: float, floor_s: float) -> float:
    """Come back once the excess queue has drained: the predicted overshoot, at least floor."""
    return max(floor_s, math.ceil(predicted_s - slo_s))
