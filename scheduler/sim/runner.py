"""The discrete-event loop: traffic in, the policy decides, simulated engines run.

It plays the dispatcher's part exactly as the interface describes it: notifications, then
``schedule(now)``, then carry the decisions out. A Preempt aborts the job on its engine; at
the end of that engine step the job reports ``on_job_finished`` with its usage so far and
comes back through ``on_job_arrived`` with its output as part of the prompt (the checkpoint).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from scheduler.interface import PolicyKind, SchedulingPolicy
from scheduler.outlook import RealtimeOutlook, admitted_ahead, door_verdict
from scheduler.policies import FairwayConfig, make_policy
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.metrics import JobRecord, Metrics
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq, StepResult
from scheduler.sim.traffic import SimJob, generate
from scheduler.step_phase import PhaseGrid
from scheduler.tiers import DEFAULT_TIER, FLEX_TIER, PRIORITY_TIER
from scheduler.ttft_calibration import TtftCalibration
from scheduler.types import Assign, Decision, JobClass, JobView, Preempt, Reject, WorkerView

# name -> (policy, engine options: priority order, preemption for realtime, realtime guard)
VARIANTS: dict[str, tuple[PolicyKind, dict[str, Any]]] = {
    "fairway": (
        PolicyKind.FAIRWAY,
        {"priority": True, "preempt_for_realtime": True, "realtime_guard": True},
    ),
    # Fairway's policy on engines without the realtime guard (layer 1 preemption only).
    "fairway-noguard": (
        PolicyKind.FAIRWAY,
        {"priority": True, "preempt_for_realtime": True, "realtime_guard": False},
    ),
    "fcfs": (PolicyKind.FCFS, {"priority": False, "preempt_for_realtime": False}),
    "priority": (PolicyKind.PRIORITY, {"priority": True, "preempt_for_realtime": True}),
    # vLLM V1 alone: realtime first in the queue, but waiting never preempts running batch.
    "vllm-priority": (PolicyKind.PRIORITY, {"priority": True, "preempt_for_realtime": False}),
}

ARRIVAL, STEP, SCHEDULE, TICK = 0, 1, 2, 3


@dataclass(slots=True)
class SimResult:
    scenario: str
    policy: str
    metrics: Metrics
    end_s: float  # simulated time when the run stopped
    busy_fraction: float
    wall_s: float
    num_workers: int


class Simulation:
    def __init__(self, scenario: Scenario, variant: str, jobs: list[SimJob] | None = None):
        kind, engine_options = VARIANTS[variant]
        engine_options = dict(engine_options)
        if variant == "fairway":
            engine_options.update(scenario.fairway_engine)
        self.scenario, self.variant = scenario, variant
        config = FairwayConfig(**scenario.fairway)
        config.default_ttft_slo_s = dict.fromkeys(
            (PRIORITY_TIER, DEFAULT_TIER, FLEX_TIER), scenario.default_ttft_slo_s
        )
        lora = scenario.lora_settings()
        if lora is not None and "adapter_load_s" not in scenario.fairway:
            config.adapter_load_s = lora.load_s  # the policy knows the engines' load time
        self.policy: SchedulingPolicy = make_policy(kind, config)
        self.config = config
        self.jobs = (
            jobs
            if jobs is not None
            else generate(
                scenario.traffic,
                scenario.tenants,
                scenario.duration_s,
                scenario.seed,
                scenario.model,
            )
        )
        self.by_id = {job.job_id: job for job in self.jobs}
        self.metrics = Metrics(scenario.bin_s, config.w_in, config.w_out)
        self.engines: dict[str, EngineModel] = {}
        self.models: dict[str, tuple[str, ...]] = {}
        period = engine_options.pop("phase_period_s", None)  # None: the profile's default
        slots: dict[tuple[str, ...], int] = {}  # the next phase slot of each pool
        for g, group in enumerate(scenario.workers):
            for i in range(group.count):
                worker_id = f"g{g}w{i}"
                cost = group.cost()
                phase = None
                if engine_options.get("realtime_guard"):
                    p = cost.phase_period_s() if period is None else period
                    slot = slots.get(group.models, 0)
                    slots[group.models] = slot + 1
                    phase = PhaseGrid.for_slot(p, slot) if p > 0 else None
                engine = EngineModel(
                    cost,
                    preemption_mode=scenario.preemption_mode,
                    prefix_hit_fraction=scenario.prefix_hit_fraction,
                    phase=phase,
                    lora=lora,
                    **engine_options,
                )
                self.engines[worker_id] = engine
                self.models[worker_id] = group.models
                self.metrics.modes_used[worker_id] = engine.mode
                if engine.mode_fallback is not None:
                    self.metrics.mode_fallbacks[worker_id] = engine.mode_fallback
        self.metrics.preemption_mode = scenario.preemption_mode
        self._events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._next_arrival = 0
        self._schedule_pending = False
        self._done_before: dict[str, int] = {}  # output kept across policy preemptions
        self._preempted: dict[str, int] = {}  # job resuming next -> KV tokens it had computed
        self._swapped_on: dict[str, str] = {}  # job -> worker holding its swapped-out KV
        self._where: dict[str, str] = {}
        # The door (scenario.door_admission): the last published outlook per model, and the
        # arrival times of realtime jobs admitted since it.
        self._outlooks: dict[str, RealtimeOutlook] = {}
        self._next_outlook = 0.0
        self._door_admitted: dict[str, deque[tuple[float, str, float]]] = defaultdict(deque)
        # ... calibrated on the first tokens of what it admitted, as the API's door is: the
        # raw prediction each admitted job was judged on, until its first token.
        self._calibration = TtftCalibration()
        self._door_predicted: dict[str, float] = {}
        self.now = 0.0

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        started = time.perf_counter()
        for worker_id in self.engines:
            self.policy.on_worker_heartbeat(self._view(worker_id))
        self._push_next_arrival()
        self._push(0.0, TICK, "")
        limit = self.scenario.duration_s + self.scenario.drain_s
        while self._events:
            at, _, kind, arg, epoch = heapq.heappop(self._events)
            if at > limit:
                break
            self.now = at
            if kind == ARRIVAL:
                self._arrive()
            elif kind == STEP:
                self._step(arg, epoch)
            elif kind == SCHEDULE:
                self._schedule_pending = False
                self._schedule()
            elif kind == TICK:
                if self._busy():
                    self._schedule()
                    self._push(at + self.scenario.tick_s, TICK, "")
            else:
                self._event(kind, arg, epoch)
        m = self.metrics
        for engine in self.engines.values():
            m.recomputed_tokens += engine.recomputed_tokens
            m.swapped_tokens += engine.swapped_tokens
            m.swap_s += engine.swap_s
            m.prefix_hit_tokens += engine.prefix_hit_tokens
            m.adapter_loads += engine.adapters.loads if engine.adapters is not None else 0
        busy = sum(e.busy_s for e in self.engines.values())
        span = max(self.now, 1e-9) * max(1, len(self.engines))  # an autoscaler may hold none
        return SimResult(
            self.scenario.name,
            self.variant,
            self.metrics,
            self.now,
            min(1.0, busy / span),
            time.perf_counter() - started,
            len(self.engines),
        )

    def _event(self, kind: int, arg: str, epoch: int) -> None:
        """Event kinds a subclass adds (scheduler.sim.disagg: KV transfers, decode steps)."""
        raise ValueError(f"unknown event kind {kind}")

    def _busy(self) -> bool:
        engines_busy = any(e.step_end is not None for e in self.engines.values())
        return self._next_arrival < len(self.jobs) or engines_busy or self.policy.num_queued() > 0

    def _push(self, at: float, kind: int, arg: str, epoch: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, arg, epoch))

    def _push_next_arrival(self) -> None:
        if self._next_arrival < len(self.jobs):
            self._push(self.jobs[self._next_arrival].arrival, ARRIVAL, "")

    def _wake(self) -> None:
        if not self._schedule_pending:
            self._schedule_pending = True
            self._push(self.now + self.scenario.schedule_delay_s, SCHEDULE, "")

    # -- events --------------------------------------------------------------------------

    def _arrive(self) -> None:
        job = self.jobs[self._next_arrival]
        self._next_arrival += 1
        self.metrics.records[job.job_id] = JobRecord(job)
        if self.scenario.door_admission and not self._through_door(job):
            self.metrics.records[job.job_id].rejected = "ttft_slo_door"
            self._push_next_arrival()
            return
        self.metrics.note_backlog(job.tenant, +1)
        self.policy.on_job_arrived(self._job_view(job, 0))
        self._push_next_arrival()
        self._wake()

    def _step(self, worker_id: str, epoch: int) -> None:
        engine = self.engines[worker_id]
        if engine.step_end is None or engine.epoch != epoch:
            return  # a cut replaced this step end
        result = engine.finish_step()
        self._account(worker_id, result)
        self._start(worker_id)
        if result.finished or result.aborted:
            self.policy.on_worker_heartbeat(self._view(worker_id))
            self._wake()

    def _schedule(self) -> None:
        t0 = time.perf_counter()
        decisions = self.policy.schedule(self.now)
        self.metrics.schedule_wall_s += time.perf_counter() - t0
        self.metrics.schedule_calls += 1
        self.metrics.decisions += len(decisions)
        self._apply(decisions)
        if self.scenario.door_admission and self.now >= self._next_outlook:
            self._next_outlook = self.now + self.scenario.outlook_every_s
            self._outlooks = {o.model: o for o in self.policy.outlook(self.now)}

    def _through_door(self, job: SimJob) -> bool:
        """The API's admission (service.api.slo_gate): a realtime job the last outlook
        predicts would miss its target is refused before the dispatcher sees it."""
        outlook = self._outlooks.get(job.model)
        if job.job_class is not JobClass.REALTIME or outlook is None:
            return True
        admitted = self._door_admitted[job.model]
        while admitted and admitted[0][0] <= outlook.at:  # the outlook has seen those
            admitted.popleft()
        max_wait_s = self._max_wait_s(job)
        if max_wait_s is None:
            target = self.config.ttft_slo(job.priority, job.ttft_slo_s)
        else:  # queue mode: the target only orders work; the deadline still bounds it
            target = math.inf if job.deadline is None else job.deadline - self.now
        own = sum(1 for _, tenant, _ in admitted if tenant == job.tenant)
        due_in_s = self.config.ttft_slo(job.priority, job.ttft_slo_s)
        ahead = admitted_ahead(((t, due) for _, t, due in admitted), tenant=job.tenant,
                               due_at=self.now + due_in_s)
        factor = self._calibration.factor(job.model) if self.scenario.door_calibration else 1.0
        verdict = door_verdict(outlook, prompt_tokens=job.prompt_tokens, target_s=target,
                               extra_jobs=ahead, tenant=job.tenant, weight=job.weight,
                               own_extra=own, max_wait_s=max_wait_s,
                               elapsed_s=self.now - outlook.at, calibration=factor,
                               adapter=job.adapter,
                               due_in_s=due_in_s)
        if verdict.retry_after is not None:
            return False
        admitted.append((self.now, job.tenant, self.now + due_in_s))
        self._door_predicted[job.job_id] = verdict.raw_predicted_s
        return True

    def _calibrate(self, record: JobRecord) -> None:
        """A door-admitted job's first token: the door learns its TTFT against what it
        predicted (scheduler.ttft_calibration), as the API's door does."""
        raw = self._door_predicted.pop(record.job.job_id, None)
        ttft = record.ttft
        if raw is not None and ttft is not None:
            self._calibration.observe(record.job.model, actual_s=ttft, raw_predicted_s=raw)

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Assign):
                job = self.by_id[d.job_id]
                done = self._done_before.get(job.job_id, 0)
                self.metrics.note_backlog(job.tenant, -1)
                self.metrics.charge(
                    job.tenant, job.weight, job.prompt_tokens + done, job.max_tokens - done
                )
                seq = self._seq_for(job, done)
                holder = self._swapped_on.pop(job.job_id, None)
                if holder is not None and holder != d.worker_id:
                    self.engines[holder].forget(job.job_id)  # resumes elsewhere: recompute
                self._where[job.job_id] = d.worker_id
                if self.engines[d.worker_id].add(seq, self.now):
                    self._start(d.worker_id)
            elif isinstance(d, Preempt):
                engine = self.engines[d.worker_id]
                gone, restart = engine.abort(d.job_id, self.now)
                if gone is not None:
                    self._requeue(d.worker_id, gone)
                if restart:
                    self._start(d.worker_id)
            elif isinstance(d, Reject):
                self.metrics.records[d.job_id].rejected = d.reason
                self.metrics.note_backlog(self.by_id[d.job_id].tenant, -1)
        self.metrics.sample_gap()

    def _seq_for(self, job: SimJob, done: int) -> Seq:
        """The engine's sequence for an assigned job that has ``done`` output tokens."""
        return Seq(
            job.job_id,
            job.tenant,
            job.job_class is JobClass.REALTIME,
            job.arrival,
            job.prompt_tokens + done,
            job.output_tokens - done,
            job.prompt_tokens + job.max_tokens,
            job.prefix_key,
            job.prefix_tokens,
            resumed=job.job_id in self._preempted,
            computed_before=self._preempted.pop(job.job_id, 0),
            hash_ids=job.hash_ids,
            block_tokens=job.block_tokens,
            adapter=job.adapter,
        )

    def _start(self, worker_id: str) -> None:
        engine = self.engines[worker_id]
        end = engine.step_end
        if end is None:
            end = engine.start(self.now)
            self.policy.on_worker_step(worker_id, *engine.step_clock())
        if end is not None:
            self._push(end, STEP, worker_id, engine.epoch)

    def _account(self, worker_id: str, result: StepResult) -> None:
        m = self.metrics
        m.engine_preemptions += result.engine_preemptions
        for tenant, tokens_in, tokens_out in result.served:
            weight = self.scenario.tenants.get(tenant, 1.0)
            m.add_service(tenant, weight, tokens_in, tokens_out, result.start, result.end)
        for seq in result.first_tokens:
            record = m.records[seq.job_id]
            if record.first_token is None:
                record.first_token = result.end
                self._calibrate(record)
            if seq.is_realtime:  # its prefill no longer queues in the engine (admission)
                self.policy.on_first_token(seq.job_id)
        for seq in result.finished:
            self._finished(worker_id, seq, result.end)
        for seq in result.aborted:
            self._requeue(worker_id, seq)

    def _finished(self, worker_id: str, seq: Seq, at: float) -> None:
        m = self.metrics
        record = m.records[seq.job_id]
        record.finished = at
        record.output = self._done_before.pop(seq.job_id, 0) + seq.total_output
        m.tokens_out[record.job.job_class] += record.output
        self._correct_charge(record.job, seq)
        del self._where[seq.job_id]
        self.policy.on_job_finished(seq.job_id, worker_id, seq.prompt, seq.total_output)

    def _requeue(self, worker_id: str, seq: Seq) -> None:
        """A policy preemption took effect: report usage, come back with the checkpoint."""
        m = self.metrics
        m.preemptions += 1
        if seq.job_id in self.engines[worker_id].swapped_out:
            self._swapped_on[seq.job_id] = worker_id  # its KV waits in that worker's CPU memory
        else:
            m.work_lost_tokens += seq.prompt + seq.total_output
        self._preempted[seq.job_id] = min(seq.prefilled, seq.prompt) + seq.generated
        m.records[seq.job_id].preemptions += 1
        m.note_backlog(seq.tenant, +1)
        self._correct_charge(self.by_id[seq.job_id], seq)
        self._where.pop(seq.job_id, None)
        done = self._done_before.get(seq.job_id, 0) + seq.total_output
        self._done_before[seq.job_id] = done
        self.policy.on_job_finished(seq.job_id, worker_id, seq.prompt, seq.total_output)
        self.policy.on_job_arrived(self._job_view(self.by_id[seq.job_id], done))
        self._wake()

    def _correct_charge(self, job: SimJob, seq: Seq) -> None:
        """Replace the max_tokens estimate charged at assignment by the real output."""
        charged_out = job.max_tokens - (seq.prompt - job.prompt_tokens) + seq.done_before
        self.metrics.charge(job.tenant, job.weight, 0, seq.total_output - charged_out)

    # -- views ---------------------------------------------------------------------------

    def _job_view(self, job: SimJob, done: int) -> JobView:
        return JobView(
            job.job_id,
            job.tenant,
            job.job_class,
            job.priority,
            job.model,
            job.arrival,
            job.deadline,
            job.prompt_tokens + done,
            job.max_tokens - done,
            tenant_weight=job.weight,
            prefix_key=job.prefix_key,
            prefix_tokens=job.prefix_tokens,
            ttft_slo_s=job.ttft_slo_s,
            max_wait_s=self._max_wait_s(job),
            generated_tokens=done,
            adapter=job.adapter,
        )

    def _max_wait_s(self, job: SimJob) -> float | None:
        """The wait budget of a realtime job whose plan queues (``Scenario.door_mode``)."""
        if self.scenario.door_mode != "queue" or job.job_class is not JobClass.REALTIME:
            return None
        return self.scenario.max_queue_wait_s

    def _view(self, worker_id: str) -> WorkerView:
        engine = self.engines[worker_id]
        progress = engine.progress() if self.scenario.heartbeat_progress else {}
        lora = engine.adapters
        return WorkerView(
            worker_id,
            self.models[worker_id],
            engine.cost.max_slots,
            engine.num_seqs(),
            engine.cost.kv_capacity_tokens,
            engine.kv_used,
            self.now,
            progress=progress,
            cost=engine.cost,
            adapters=lora.warm(self.now) if lora is not None else (),
            max_loras=lora.settings.max_loras if lora is not None else 0,
            max_cpu_loras=lora.settings.cpu_capacity if lora is not None else 0,
        )


def run_variant(scenario: Scenario, variant: str, jobs: list[SimJob] | None = None) -> SimResult:
    if scenario.disaggregation is not None:
        from scheduler.sim.disagg import DisaggSimulation  # it extends Simulation

        return DisaggSimulation(scenario, variant, jobs).run()
    return Simulation(scenario, variant, jobs).run()
