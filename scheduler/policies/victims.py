"""Which batch jobs to take back when a realtime job cannot be placed.

Victim key, smallest first: (work lost, -deadline slack, -priority value, job id).

- Work lost: tokens the resume must prefill again, prompt + output so far (the checkpoint
  keeps the text, not the KV). Output so far comes from the heartbeat's ``progress`` or, when
  absent, from the time the job has run divided by the worker's decode step time.
- Most slack next: a job that can wait longest loses least by waiting.
- Lowest tier last: a larger priority value (batch 3 over flex 2) goes first.

Realtime jobs are never victims, and neither is batch with less slack than the escalation
margin: taking it back would make it miss its deadline, which is what escalation prevents.
The worker chosen is the one whose cheapest sufficient victim set loses the least work or,
with earliest-start placement, gives the realtime job the soonest first token
(``VictimChooser.for_realtime``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.policies import rt_start
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fleet import Fleet
from scheduler.policies.workers import AssignedJob, WorkerState, kv_need
from scheduler.types import JobView


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


class VictimChooser:
    """The batch the policy takes back: for a realtime job, and from a worker joining a
    realtime lane. Choosing changes nothing; the policy preempts what it returns."""

    def __init__(self, config: FairwayConfig, fleet: Fleet) -> None:
        self.config = config
        self._fleet = fleet

    def for_realtime(self, job: JobView, fit: WorkerState | None, now: float) -> VictimPlan | None:
        """``fit``: where placement would put the job, None when nothing has room. Nothing
        fits: the best plan among the examined workers. ``fit`` has room (earliest start only):
        a plan on a worker whose step ends sooner, and only if its first token there, plus its
        victims' recompute weighed at ``victim_lost_weight``, still beats ``fit``'s by
        ``rt_preempt_min_gain_s``. Plans cost a sort of the worker's jobs, so at most
        ``rt_preempt_scan`` such workers get one."""
        cfg = self.config
        pool = self._fleet.pools.get(job.model)
        if not cfg.preemption_enabled or pool is None:
            return None
        lead, gain = cfg.dispatch_lead_s, cfg.rt_preempt_min_gain_s
        workers = list(pool.workers.values())[: cfg.victim_scan_limit]
        worth = 0.0
        if fit is not None:
            if not cfg.rt_earliest_start or (
                rt_start.predicted_start(fit, now, lead) <= now + lead + gain
            ):
                return None  # the roomy worker starts it about now: nothing to gain
            worth = rt_start.predicted_first_token(fit, job, now, lead) - gain
            workers = self._sooner_than(worth, job, fit, workers, now)
        lost_s = cfg.victim_lost_weight * (pool.cost or cfg.default_cost).prefill_per_token_s
        plan = choose_victims(
            workers,
            kv_need(job),
            now,
            cfg.default_batch_window_s,
            cfg.escalation_margin_s,
            (lambda w: rt_start.predicted_first_token(w, job, now, lead))
            if cfg.rt_earliest_start
            else None,
            lost_s,
        )
        if plan is None or fit is None:
            return plan
        at = rt_start.predicted_first_token(plan.worker, job, now, lead)
        return plan if at + lost_s * plan.work_lost < worth else None

    def _sooner_than(
        self, worth: float, job: JobView, fit: WorkerState, workers: list[WorkerState], now: float
    ) -> list[WorkerState]:
        """Up to ``rt_preempt_scan`` workers other than ``fit`` where the job's first token
        is predicted before ``worth``, soonest first."""
        lead = self.config.dispatch_lead_s
        others = [w for w in workers if w is not fit]
        timed = [(rt_start.predicted_first_token(w, job, now, lead), w) for w in others]
        sooner = [(at, w.worker_id, w) for at, w in timed if at < worth]
        return [w for _, _, w in heapq.nsmallest(self.config.rt_preempt_scan, sooner)]

    def for_lane(self, ws: WorkerState, now: float) -> list[AssignedJob]:
        """The batch a worker that just joined a lane gives up: all beyond
        ``lane_batch_slots``, in victim key order, never batch short of slack."""
        cfg = self.config
        batch_items = [item for item in ws.jobs.values() if not item.is_realtime]
        excess = len(batch_items) - cfg.lane_batch_slots
        if excess <= 0 or not cfg.preemption_enabled:
            return []
        keyed = sorted(
            (victim_key(item, ws, now, cfg.default_batch_window_s), item)
            for item in batch_items
            if slack_s(item, ws, now, cfg.default_batch_window_s) >= cfg.escalation_margin_s
        )
        return [item for _, item in keyed[:excess]]
