"""Where a job with a LoRA adapter goes, among the workers with room (the rule is in
``adapters``): realtime by its earliest predicted first token counting the adapter's wait,
the rest warm first, then a free adapter slot, then least loaded."""

from __future__ import annotations

from scheduler.policies import rt_start
from scheduler.policies.workers import WorkerState
from scheduler.types import JobView


def adapter_wait_s(ws: WorkerState, adapter: str, now: float, load_s: float) -> float:
    return ws.adapters.ledger.wait_s(adapter, now, load_s)


def earliest_first_token(
    candidates: list[WorkerState], job: JobView, adapter: str, now: float, lead_s: float,
    load_s: float,
) -> WorkerState:
    """The worker where the job's first token is predicted soonest. The engine sees the job
    only once its adapter is ready there, so the adapter's wait adds to the lead: a warm
    worker wins unless a cold one's start after the load is still sooner. Workers that
    cannot batch the adapter now come after, by ``AdapterUse.tier``; ties go to the warm
    worker, then the one with the least realtime (candidates come least loaded first)."""

    def key(ws: WorkerState) -> tuple[tuple[int, int], float, bool, int]:
        wait = adapter_wait_s(ws, adapter, now, load_s)
        first = rt_start.predicted_first_token(ws, job, now, lead_s + wait)
        tier = ws.adapters.tier(adapter, ws.view)
        return (tier, first, not ws.adapters.ledger.holds(adapter), ws.rt_count)

    return min(candidates, key=key)


def warm_first(candidates: list[WorkerState], adapter: str) -> WorkerState:
    """Candidates come least loaded first: the first warm one with a slot for the adapter,
    else the first with a free slot (the adapter is loaded there), else by
    ``AdapterUse.tier``."""

    def key(item: tuple[int, WorkerState]) -> tuple[tuple[int, int], bool, int]:
        index, ws = item
        tier = ws.adapters.tier(adapter, ws.view)
        return (tier, not ws.adapters.ledger.holds(adapter), index)

    return min(enumerate(candidates), key=key)[1]
