"""Workers that come and go: the simulator with an autoscaler in front of its pool.

The scenario's workers are every GPU the autoscaler may use (its ``max_workers``). Every
``interval_s`` (KEDA's polling) a rule says how many workers the model wants; as KEDA's HPA
does, a scale-up is carried out at once and a scale-down only once the largest count asked
for over the last ``cooldown_s`` is below the pool (its stabilization window), one worker
per ``down_step_s``. A worker asked for holds its GPU from that moment, and serves only
``start_delay_s`` later (its model load; by default the profile's ``start_s``). A worker let
go drains: the policy sees it without slots (as a draining worker's heartbeat says) and it
goes once its engine is empty.

Rules (``AutoscaleSettings.rule``):

- ``fixed``: every worker, all the time.
- ``fairway``: ``scheduler.autoscale.desired_workers``, fed what the dispatcher reads
  (scheduler.dispatcher.autoscale_feed): the policy's outlook, realtime jobs ended in the last
  minute priced by the cost profile, the open batch work by deadline minute, the share of
  ``max_tokens`` batch jobs produced, and how long the model has had no traffic. With
  ``min_workers`` 0 it scales to zero after its ``idle_after_s`` (``fairway`` overrides) and
  back on the first request (``wake``); realtime jobs that arrive with no live worker are
  kept in ``cold_arrivals`` (they wait out a start: the API's waiting room).
- ``queue_depth``: production-stack's KEDA rule, vLLM's ``num_requests_waiting`` over a
  threshold per replica (waiting: queued in the policy or in an engine, not yet running),
  and zero replicas once nothing waited for the cooldown.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.autoscale import (
    AutoscaleConfig,
    BatchDue,
    Demand,
    batch_work_s,
    desired_workers,
    realtime_busy_s,
)
from scheduler.outlook import predict_new_ttft
from scheduler.sim.jobs import SimJob
from scheduler.sim.runner import SimResult, Simulation
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq
from scheduler.types import Assign, Decision, JobClass, Reject, WorkerView

RULES = ("fixed", "fairway", "queue_depth")
AUTOSCALE, WORKER_UP = 10, 11
RECENT_S = 60.0  # the dispatcher's window of ended realtime jobs


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    rule: str = "fairway"
    # Asked for -> serving (pod start and model load); None: the profile's ``start_s``.
    start_delay_s: float | None = None
    min_workers: int = 1
    initial_workers: int = 1
    interval_s: float = 15.0  # KEDA's pollingInterval
    cooldown_s: float = 900.0  # the scale-down stabilization window
    down_step_s: float = 300.0  # at most one worker let go per this
    queue_threshold: float = 5.0  # queue_depth: waiting requests per replica
    ttft_target_s: float = 1.0  # the realtime target the fairway rule reads the outlook by
    fairway: dict[str, Any] = field(default_factory=dict)  # AutoscaleConfig overrides
    gpu_hours_until_s: float | None = None  # count GPU time up to here (None: the run's end)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, not {self.rule!r}")


class AutoscaledSimulation(Simulation):
    def __init__(self, scenario: Scenario, variant: str, settings: AutoscaleSettings,
                 jobs: list[SimJob] | None = None) -> None:
        super().__init__(scenario, variant, jobs)
        if len({g.models for g in scenario.workers}) != 1:
            raise ValueError("the autoscaler scales one model's pool")
        self.settings = settings
        self.model = scenario.workers[0].models[0]
        self.cost = scenario.workers[0].cost()
        self.start_delay_s = (settings.start_delay_s if settings.start_delay_s is not None
                              else self.cost.start_s)
        self.pool = dict(self.engines)  # every GPU the autoscaler may use
        first = len(self.pool) if settings.rule == "fixed" else settings.initial_workers
        self.engines = {w: self.pool[w] for w in list(self.pool)[:first]}
        self.allocated: dict[str, float] = dict.fromkeys(self.engines, 0.0)  # GPU held since
        self.starting: set[str] = set()
        self.draining: set[str] = set()
        self.gpu_s = 0.0
        self.timeline: list[tuple[float, int, int, str]] = []  # (t, workers held, asked, why)
        self._asked: deque[tuple[float, int]] = deque()  # the stabilization window
        self._last_down = -math.inf
        self._queued: dict[str, JobClass] = {}  # jobs in the policy's queue
        self._queued_rt = 0
        self._batch_open: dict[str, tuple[float, int, int]] = {}  # job -> (due, prompt, asked)
        self._batch_due: dict[float, list[int]] = {}  # due minute -> [jobs, prompt, asked]
        self._batch_done = [0, 0]  # output, max_tokens of ended batch jobs
        self._rt_recent: deque[tuple[float, int, int]] = deque()
        self._rt_sums = [0, 0]  # prompt, output of _rt_recent
        self._busy_at = 0.0  # last realtime traffic (queued, running or ended)
        self.cold_arrivals: list[str] = []  # realtime jobs that arrived with no live worker

    # -- the loop's hooks ----------------------------------------------------------------

    def run(self) -> SimResult:
        if self.settings.rule != "fixed":
            self._push(0.0, AUTOSCALE, "")
        result = super().run()
        until = self.settings.gpu_hours_until_s
        end = self.now if until is None else until
        for since in self.allocated.values():
            self.gpu_s += max(0.0, end - since)
        self.allocated.clear()
        return result

    def _event(self, kind: int, arg: str, epoch: int) -> None:
        if kind == AUTOSCALE:
            self._autoscale()
            self._push(self.now + self.settings.interval_s, AUTOSCALE, "")
        elif kind == WORKER_UP:
            self._worker_up(arg)
        else:
            super()._event(kind, arg, epoch)

    def _arrive(self) -> None:
        job = self.jobs[self._next_arrival]
        super()._arrive()
        if job.job_class is JobClass.REALTIME and not self._live():
            self.cold_arrivals.append(job.job_id)
        if self.metrics.records[job.job_id].rejected is None:
            self._enqueue(job)
            if job.job_class is JobClass.BATCH:
                self._open_batch(job)

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, (Assign, Reject)):
                self._dequeue(d.job_id)
            if isinstance(d, Reject):
                self._close_batch(d.job_id)
        super()._apply(decisions)

    def _requeue(self, worker_id: str, seq: Seq) -> None:
        super()._requeue(worker_id, seq)
        self._enqueue(self.by_id[seq.job_id])

    def _finished(self, worker_id: str, seq: Seq, at: float) -> None:
        super()._finished(worker_id, seq, at)
        job = self.by_id[seq.job_id]
        output = self.metrics.records[seq.job_id].output
        if job.job_class is JobClass.REALTIME:
            self._rt_recent.append((at, job.prompt_tokens, output))
            self._rt_sums[0] += job.prompt_tokens
            self._rt_sums[1] += output
        else:
            self._close_batch(job.job_id)
            self._batch_done[0] += output
            self._batch_done[1] += job.max_tokens

    def _step(self, worker_id: str, epoch: int) -> None:
        if worker_id not in self.engines:
            return  # let go: a step end left over from before
        super()._step(worker_id, epoch)
        if worker_id in self.draining:
            self._retire_if_empty(worker_id)

    def _view(self, worker_id: str) -> WorkerView:
        view = super()._view(worker_id)
        return replace(view, max_slots=0) if worker_id in self.draining else view

    # -- bookkeeping (what the dispatcher reads from Postgres) ---------------------------

    def _enqueue(self, job: SimJob) -> None:
        if job.job_id not in self._queued:
            self._queued[job.job_id] = job.job_class
            self._queued_rt += job.job_class is JobClass.REALTIME

    def _dequeue(self, job_id: str) -> None:
        job_class = self._queued.pop(job_id, None)
        self._queued_rt -= job_class is JobClass.REALTIME

    def _open_batch(self, job: SimJob) -> None:
        due = job.deadline if job.deadline is not None else job.arrival + 86400.0
        minute = math.floor(due / 60.0) * 60.0
        self._batch_open[job.job_id] = (minute, job.prompt_tokens, job.max_tokens)
        bucket = self._batch_due.setdefault(minute, [0, 0, 0])
        bucket[0] += 1
        bucket[1] += job.prompt_tokens
        bucket[2] += job.max_tokens

    def _close_batch(self, job_id: str) -> None:
        entry = self._batch_open.pop(job_id, None)
        if entry is None:
            return
        minute, prompt, asked = entry
        bucket = self._batch_due[minute]
        bucket[0] -= 1
        bucket[1] -= prompt
        bucket[2] -= asked
        if bucket[0] == 0:
            del self._batch_due[minute]

    # -- the rules -----------------------------------------------------------------------

    def _live(self) -> list[str]:
        return [w for w in self.engines if w not in self.draining]

    def _ask(self) -> tuple[int, str]:
        s = self.settings
        if s.rule == "queue_depth":
            waiting = len(self._queued) + sum(len(self.engines[w].waiting) for w in self._live())
            n = math.ceil(waiting / s.queue_threshold)
            return min(len(self.pool), max(s.min_workers, n)), "queue"
        decided = desired_workers(self._demand(), AutoscaleConfig(
            min_workers=s.min_workers, max_workers=len(self.pool),
            start_delay_s=self.start_delay_s, **s.fairway))
        return decided.workers, decided.reason

    def _demand(self) -> Demand:
        while self._rt_recent and self._rt_recent[0][0] < self.now - RECENT_S:
            _, prompt, output = self._rt_recent.popleft()
            self._rt_sums[0] -= prompt
            self._rt_sums[1] -= output
        outlook = next((o for o in self.policy.outlook(self.now) if o.model == self.model),
                       None)
        done_out, done_asked = self._batch_done
        ratio = min(1.0, max(0.05, done_out / done_asked)) if done_asked else 1.0
        due = tuple(BatchDue(minute - self.now,
                             batch_work_s(self.cost, prompt, asked * ratio, jobs))
                    for minute, (jobs, prompt, asked) in self._batch_due.items())
        rt_inflight = (outlook.rt_load - outlook.rt_queued) if outlook else 0
        if self._queued_rt or self._rt_recent or rt_inflight:  # realtime traffic only
            self._busy_at = self.now
        return Demand(
            self.model,
            live_workers=len(self._live()),
            slots_per_worker=self.cost.max_slots,
            rt_waiting=self._queued_rt,
            rt_inflight=rt_inflight,
            rt_busy_s_per_s=realtime_busy_s(self.cost, *self._rt_sums) / RECENT_S,
            predicted_ttft_s=(predict_new_ttft(outlook,
                                               prompt_tokens=int(outlook.mean_prompt_tokens))
                              if outlook else None),
            ttft_target_s=self.settings.ttft_target_s,
            batch_due=due,
            batch_waiting=len(self._queued) - self._queued_rt,
            idle_s=self.now - self._busy_at,
        )

    # -- carrying it out -----------------------------------------------------------------

    def _autoscale(self) -> None:
        s = self.settings
        asked, reason = self._ask()
        self._asked.append((self.now, asked))
        while self._asked and self._asked[0][0] < self.now - s.cooldown_s:
            self._asked.popleft()
        held = len(self._live()) + len(self.starting)
        target = asked if asked >= held else max(a for _, a in self._asked)
        if target > held:
            for _ in range(target - held):
                self._scale_up()
        elif target < held and self.now - self._last_down >= s.down_step_s:
            self._scale_down()
            self._last_down = self.now
        self.timeline.append((self.now, len(self.allocated), asked, reason))

    def _scale_up(self) -> None:
        if self.draining:  # a draining worker is still loaded: keep it
            worker = min(self.draining, key=lambda w: self.engines[w].num_seqs())
            self.draining.discard(worker)
            self.policy.on_worker_heartbeat(self._view(worker))
            self._wake()
            return
        free = [w for w in self.pool if w not in self.allocated]
        if not free:
            return
        worker = free[0]
        self.allocated[worker] = self.now
        self.starting.add(worker)
        self._push(self.now + self.start_delay_s, WORKER_UP, worker)

    def _worker_up(self, worker: str) -> None:
        if worker not in self.starting:
            return  # let go while it loaded
        self.starting.discard(worker)
        self.engines[worker] = self.pool[worker]
        self.policy.on_worker_heartbeat(self._view(worker))
        self._wake()

    def _scale_down(self) -> None:
        if self.starting:  # a pod still loading goes first: it serves nobody yet
            worker = self.starting.pop()
            self._release(worker)
            return
        live = self._live()
        if not live:
            return
        worker = min(live, key=lambda w: (self.engines[w].num_seqs(), w))
        self.draining.add(worker)
        self.policy.on_worker_heartbeat(self._view(worker))
        self._retire_if_empty(worker)

    def _retire_if_empty(self, worker: str) -> None:
        engine = self.engines[worker]
        if engine.num_seqs() or engine.step_end is not None:
            return
        self.draining.discard(worker)
        self.policy.on_worker_lost(worker)
        del self.engines[worker]
        self._release(worker)

    def _release(self, worker: str) -> None:
        since = self.allocated.pop(worker)
        until = self.settings.gpu_hours_until_s
        end = self.now if until is None else min(self.now, until)
        self.gpu_s += max(0.0, end - since)
