"""Holding a LoRA adapter job in the policy's queue while no worker could run it soon
(``FairwayConfig.adapter_hold``).

An engine batches at most ``max_loras`` distinct adapters; a request for another waits in the
engine's queue until every request of one running adapter is done, and the adapters that keep
coming keep their slots. Sent to such a worker, a job waits there, bound to that one engine,
while a slot may free on another. Held in the policy instead, it goes to the first worker
where a slot frees (each pass looks again: ``AdapterUse.tier`` is 0 there then).

A job is held while every candidate worker (those the placer would weigh) is crowded out for
its adapter: all its adapter slots are taken by other adapters of the jobs it holds. Whether
the worker keeps the adapter loaded (warm) does not matter: a warm adapter without a slot
waits in the engine's queue as long as a cold one, and letting warm workers take it measured
no better than not holding (docs/results/sched_lora.md). Never past its deadline's margin:

- realtime is held until its latest start that still makes its first-token deadline after a
  load, its own prefill and one step, less ``adapter_hold_margin_s``; then it is placed as
  without holding (the least oversubscribed worker);
- batch and flex wait until they escalate (their latest start before the deadline, as any
  batch job), then are placed as without holding.

A held job goes back into its queue where it was (``WaitingJobs.put_back``): it keeps its
place in fair share (its tenant is not charged) and in EDF.
"""

from __future__ import annotations

from scheduler.cost_model import CostModel
from scheduler.policies.adapters import lora_slots
from scheduler.policies.config import FairwayConfig
from scheduler.policies.workers import WorkerState
from scheduler.types import JobClass, JobView


def crowded_out(ws: WorkerState, adapter: str) -> bool:
    """The worker's adapter slots are all taken by other adapters of its jobs: a job for
    ``adapter`` would wait there until every job of one of them is done."""
    use = ws.adapters
    return adapter not in use.jobs and len(use.jobs) >= lora_slots(ws.view)


def hold_until(job: JobView, config: FairwayConfig, cost: CostModel,
               load_s: float | None = None) -> float:
    """The latest a realtime job may be held and still make its first-token deadline: a
    load (``load_s``, the pool's measured, else the configured), its own prefill, one step
    and the dispatch lead before it, less the margin."""
    deadline = job.arrival + config.ttft_slo(job.priority, job.ttft_slo_s)
    load = config.adapter_load_s if load_s is None else load_s
    start = (load + cost.prefill_s(job.prompt_tokens)
             + cost.step_s(1, job.prompt_tokens, 0) + config.dispatch_lead_s)
    return deadline - start - config.adapter_hold_margin_s


def must_wait(candidates: list[WorkerState], job: JobView, adapter: str, now: float,
              config: FairwayConfig, cost: CostModel, escalated: bool,
              load_s: float | None = None) -> bool:
    """Whether the job waits in the policy's queue this pass (see the module's rule). No
    candidate (no room anywhere) is not a hold: the job waits, or realtime preempts, as
    without holding."""
    if not candidates or escalated:
        return False
    if job.job_class is JobClass.REALTIME and now >= hold_until(job, config, cost, load_s):
        return False
    return all(crowded_out(ws, adapter) for ws in candidates)
