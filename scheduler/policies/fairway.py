"""Fairway's full policy: class levels, weighted VTC per class, EDF per tenant, deadline
escalation, affinity placement, adaptive realtime headroom, victim choice and admission.

Ordering, per ``schedule(now)`` pass:

1. Due batch escalates: a batch job whose latest start (deadline - predicted service -
   margin) has come moves to level 0, beside realtime, before its deadline (``waiting``).
2. New realtime jobs are admitted or refused; flex is refused first (``admission``); a
   queued realtime job past its plan's longest queue wait is refused (``wait_budget``).
3. With ``rt_lane`` (off by default), lanes are resized and joining workers cleared of batch
   (``lane``).
4. Level 0 (realtime + escalated batch), then level 1 (batch) fill the room. Within a level,
   the backlogged tenant with the smallest weighted VTC counter goes next (over the models
   that still have room); within a tenant, the earliest deadline.

Realtime goes to the worker where its first token is predicted soonest, from the engines'
step clocks (``placement``, ``rt_start``); a level-0 realtime job that finds no room takes it
from batch (``victims``); an escalated flex job that finds none is refused rather than run
late. See docs/scheduler.md for the bounds.

The policy composes its parts, which share ``Fleet`` (workers, pools, where each assigned
job runs) and ``WaitingJobs`` (queues, VTC counters): ``Placer``, ``VictimChooser`` and
``Admission``. The parts decide; assignments, preemptions and the charges that go with them
are made here, in decision order. Admission takes the jobs it refuses out of the queue itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.interface import SchedulingPolicy
from scheduler.outlook import RealtimeOutlook
from scheduler.policies.admission import Admission
from scheduler.policies.config import FairwayConfig
from scheduler.policies.express_grants import express_grants
from scheduler.policies.fleet import Fleet
from scheduler.policies.placement import Placer
from scheduler.policies.victims import VictimChooser
from scheduler.policies.vtc import VirtualCounters
from scheduler.policies.wait_budget import WaitBudgets
from scheduler.policies.waiting import LEVELS, WaitingJobs
from scheduler.policies.workers import AssignedJob, WorkerState
from scheduler.types import (
    Assign,
    Decision,
    ExpressGrant,
    JobClass,
    JobView,
    Preempt,
    Reject,
    WorkerView,
)


class FairwayPolicy(SchedulingPolicy):
    def __init__(self, config: FairwayConfig | None = None) -> None:
        self.config = cfg = config or FairwayConfig()
        self.fleet = Fleet(cfg)
        self.waiting = WaitingJobs(cfg, self.fleet)
        self.placer = Placer(cfg, self.fleet)
        self.victims = VictimChooser(cfg, self.fleet)
        self.admission = Admission(cfg, self.fleet, self.waiting)
        self.wait_budgets = WaitBudgets(cfg, self.fleet, self.waiting)
        # What each assigned job's tenant was charged: level, tenant, prompt, max_tokens.
        self._charged: dict[str, tuple[int, str, int, int]] = {}
        self._now = 0.0

    @property
    def counters(self) -> list[VirtualCounters]:
        """The VTC counters of each level (exported as the fair-share metric)."""
        return self.waiting.counters

    # -- notifications -----------------------------------------------------------------

    def on_job_arrived(self, job: JobView) -> None:
        if self.waiting.level_of(job.job_id) is not None:
            return
        if self.fleet.worker_of(job.job_id) is not None:
            self._unassign(job.job_id, refund=True)  # back after a lost lease
        self.waiting.add(job)
        self.admission.note_arrival(job)
        self.wait_budgets.note(job)
        if job.job_class is JobClass.REALTIME:
            self.placer.note_realtime(job, self._now)

    def on_job_cancelled(self, job_id: str) -> None:
        self.waiting.withdraw(job_id)

    def on_job_finished(
        self, job_id: str, worker_id: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        self._settle(job_id, prompt_tokens, completion_tokens)
        item = self._unassign(job_id, refund=False)
        # 0/0 is unknown usage (a job that failed before its engine ran it): it says nothing
        # of how large realtime jobs are or how long a tenant's answers run.
        known = prompt_tokens > 0 or completion_tokens > 0
        if item is not None and item.is_realtime and known:
            self.admission.note_realtime_done(prompt_tokens, completion_tokens, item.job.model,
                                              held_s=self._now - item.assigned_at)
        if item is not None and self.config.length_aware and known:  # finished, not preempted
            done = item.job.generated_tokens
            self.waiting.lengths.observe(
                item.job.tenant_id, prompt_tokens - done, completion_tokens + done
            )
        self.fleet.left_engine(job_id, worker_id)

    def on_worker_heartbeat(self, worker: WorkerView) -> None:
        self.fleet.heartbeat(worker, self._now)

    def on_worker_step(self, worker_id: str, started_at: float | None, step_s: float) -> None:
        self.fleet.step_clock(worker_id, started_at, step_s)

    def on_first_token(self, job_id: str) -> None:
        self.fleet.first_token(job_id)

    def on_worker_lost(self, worker_id: str) -> None:
        ws = self.fleet.workers.get(worker_id)
        if ws is None:
            return
        for job_id in list(ws.jobs):
            self._unassign(job_id, refund=True)
        self.fleet.remove_worker(worker_id)

    def outlook(self, now: float) -> list[RealtimeOutlook]:
        return self.admission.outlook(now)

    def express(self, now: float, held: Mapping[str, int], per_model: int) -> list[ExpressGrant]:
        return express_grants(self.fleet, self.placer, now, held, per_model)

    def on_job_placed(self, job: JobView, worker_id: str) -> bool:
        """The ledger of ``_assign`` for a job the API placed with a lent ticket: it never
        waited, so it is not admitted again (the door's SLO gate admitted it)."""
        ws = self.fleet.workers.get(worker_id)
        if ws is None or job.model not in ws.view.models:
            return False
        self.waiting.withdraw(job.job_id)  # e.g. a rescan offered it before its NOTIFY came
        if self.fleet.worker_of(job.job_id) is not None:
            return True  # heard twice
        self.admission.realtime_size.note_asked(job.max_tokens)
        self.placer.note_realtime(job, self._now)
        self.fleet.assign(job, ws, 0, self._now)
        self.waiting.charge_placed(job, 0)
        self._charged[job.job_id] = (0, job.tenant_id, job.prompt_tokens, job.max_tokens)
        return True

    def num_queued(self) -> int:
        return len(self.waiting)

    def level_of(self, job_id: str) -> int | None:
        """0 = realtime level (realtime or escalated), 1 = batch, None = not queued."""
        return self.waiting.level_of(job_id)

    def worker_of(self, job_id: str) -> str | None:
        return self.fleet.worker_of(job_id)

    # -- the pass ----------------------------------------------------------------------

    def schedule(self, now: float) -> list[Decision]:
        self._now = now
        self.waiting.escalate_due(now)
        decisions = self.admission.admit(now)
        decisions += self.wait_budgets.expire(now)
        for ws in self.placer.lane_joiners(now):
            for item in self.victims.for_lane(ws, now):
                self._preempt(item, ws, "realtime_lane", decisions)
        for level in LEVELS:
            self._fill(level, now, decisions)
        return decisions

    def _fill(self, level: int, now: float, out: list[Decision]) -> None:
        blocked: set[str] = set()
        deferred: list[JobView] = []
        held: list[JobView] = []  # adapter jobs that wait for a slot (adapter_hold.py)
        while len(deferred) < self.config.max_deferred_per_pass:
            job = self.waiting.next_job(level, blocked)
            if job is None:
                break
            if len(held) < self.config.adapter_hold_scan and self.placer.holds_back(
                    job, level, now, self.waiting.is_escalated(job.job_id)):
                held.append(job)
                continue
            if self._try_place(job, level, now, out):
                continue
            deferred.append(job)
            if not self.placer.room_left(job.model, level, now):
                blocked.add(job.model)
        for job in deferred + held:
            self.waiting.put_back(job, level)

    def _try_place(self, job: JobView, level: int, now: float, out: list[Decision]) -> bool:
        """Assign, preempt for, or refuse the job; False when it must wait."""
        ws = self.placer.place(job, level, now)
        if job.job_class is JobClass.REALTIME:
            plan = self.victims.for_realtime(job, ws, now)
            if plan is not None:
                for victim in plan.victims:
                    self._preempt(victim, plan.worker, "realtime", out)
                self._assign(job, plan.worker, level, now, out)
                return True
        if ws is not None:
            self._assign(job, ws, level, now, out)
            return True
        if self.waiting.is_escalated(job.job_id) and job.priority == self.config.flex_priority:
            self.waiting.clear_escalated(job.job_id)
            out.append(Reject(job.job_id, "flex_deadline", self.config.min_retry_after_s))
            return True
        return False

    # -- the ledger --------------------------------------------------------------------

    def _assign(
        self, job: JobView, ws: WorkerState, level: int, now: float, out: list[Decision]
    ) -> None:
        self.waiting.clear_escalated(job.job_id)
        self.fleet.assign(job, ws, level, now)
        self.waiting.charge_assigned(job, level)
        self._charged[job.job_id] = (level, job.tenant_id, job.prompt_tokens, job.max_tokens)
        out.append(Assign(job.job_id, ws.worker_id))

    def _preempt(
        self, item: AssignedJob, ws: WorkerState, reason: str, out: list[Decision]
    ) -> None:
        """Its room is free from now on. Its charge stands until it reports its usage
        (``on_job_finished``) and it comes back through ``on_job_arrived``."""
        out.append(Preempt(item.job.job_id, ws.worker_id, reason))
        self._unassign(item.job.job_id, refund=False)

    def _unassign(self, job_id: str, *, refund: bool) -> AssignedJob | None:
        if refund:
            charged = self._charged.pop(job_id, None)
            if charged is not None:
                level, tenant, charged_in, charged_out = charged
                self.waiting.charge(level, tenant, -charged_in, -charged_out)
        return self.fleet.release(job_id, self._now)

    def _settle(self, job_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Replace the charge made at assignment by the job's real usage."""
        charged = self._charged.pop(job_id, None)
        # (0, 0) means "usage unknown" (the dispatcher may not have it): keep the estimate.
        if charged is not None and (prompt_tokens or completion_tokens):
            level, tenant, charged_in, charged_out = charged
            self.waiting.charge(
                level, tenant, prompt_tokens - charged_in, completion_tokens - charged_out
            )
