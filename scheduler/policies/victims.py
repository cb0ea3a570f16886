"""Which batch jobs to take back when a realtime job cannot be placed.

Victim key, smallest first: (work lost, -deadline slack, -priority value, job id).

- Work lost: tokens the resume must prefill again, prompt + output so far (the checkpoint
  keeps the text, not the KV). Output so far comes from the heartbeat's ``progress`` or, when
  absent, from the time the job has run divided by the worker's decode step time.
- Most slack next: a job that can wait longest loses least by waiting.
- Lowest tier last: a larger priority value (batch 3 over flex 2) goes first.

Realtime jobs are never victims, and neither is batch with less slack than the escalation
margin: taking it back would make it miss its deadline, which is what escalation prevents.
The worker chosen is the one whose cheapest sufficient victim set loses the least work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.policies.workers import AssignedJob, WorkerState


@dataclass(slots=True)
class VictimPlan:
    worker: WorkerState
    victims: list[AssignedJob]
    work_lost: int


def generated_so_far(item: AssignedJob, ws: WorkerState, now: float) -> int:
    reported = ws.view.progress.get(item.job.job_id)
    if reported is not None:
        return reported
    running = max(0.0, now - item.assigned_at - ws.cost.prefill_s(item.job.prompt_tokens))
    step = ws.cost.typical_step_s(max(1, ws.used_slots()), item.job.prompt_tokens)
    return min(item.job.max_tokens, int(running / step)) if step > 0 else 0


def slack_s(item: AssignedJob, ws: WorkerState, now: float, default_window_s: float) -> float:
    job = item.job
    deadline = job.deadline if job.deadline is not None else job.arrival + default_window_s
    remaining = max(0, job.max_tokens - generated_so_far(item, ws, now))
    return deadline - now - ws.cost.service_s(job.prompt_tokens, remaining, ws.used_slots())


def victim_key(
    item: AssignedJob, ws: WorkerState, now: float, default_window_s: float
) -> tuple[int, float, int, str]:
    lost = item.job.prompt_tokens + generated_so_far(item, ws, now)
    return (lost, -slack_s(item, ws, now, default_window_s), -item.job.priority, item.job.job_id)


def plan_for_worker(
    ws: WorkerState,
    need_kv: int,
    now: float,
    default_window_s: float,
    min_slack_s: float,
) -> VictimPlan | None:
    """The cheapest prefix of this worker's victims (by key) that frees one slot and the KV."""
    candidates = [
        item
        for item in ws.jobs.values()
        if not item.is_realtime and slack_s(item, ws, now, default_window_s) >= min_slack_s
    ]
    candidates.sort(key=lambda item: victim_key(item, ws, now, default_window_s))
    chosen: list[AssignedJob] = []
    lost = freed_kv = 0
    for item in candidates:
        slots, kv = _room_after(ws, len(chosen), freed_kv)
        if slots >= 1 and kv >= need_kv:
            break
        chosen.append(item)
        lost += item.job.prompt_tokens + generated_so_far(item, ws, now)
        freed_kv += item.kv_need
    free_slots, free_kv = _room_after(ws, len(chosen), freed_kv)
    if free_slots >= 1 and free_kv >= need_kv and chosen:
        return VictimPlan(ws, chosen, lost)
    return None


def _room_after(ws: WorkerState, num_victims: int, freed_kv: int) -> tuple[int, int]:
    """(free slots, free KV) once the victims leave; they count in both views of the load."""
    view = ws.view
    used = max(view.running, len(ws.jobs)) - num_victims
    kv_used = max(view.kv_used_tokens, ws.kv_reserved) - freed_kv
    return view.max_slots - used, view.kv_capacity_tokens - kv_used


def choose_victims(
    workers: list[WorkerState],
    need_kv: int,
    now: float,
    default_window_s: float,
    min_slack_s: float,
    start_of: Callable[[WorkerState], float] | None = None,
    lost_token_s: float = 0.0,
) -> VictimPlan | None:
    """``start_of``: when the realtime job would start on a worker (rt_start.py); a plan then
    costs that start plus its work lost at ``lost_token_s`` seconds per token."""
    best: VictimPlan | None = None
    best_key: tuple[float, int, int] | None = None
    for ws in workers:
        plan = plan_for_worker(ws, need_kv, now, default_window_s, min_slack_s)
        if plan is None:
            continue
        cost = 0.0 if start_of is None else start_of(ws) + lost_token_s * plan.work_lost
        key = (cost, plan.work_lost, len(plan.victims))
        if best_key is None or key < best_key:
            best, best_key = plan, key
    return best
