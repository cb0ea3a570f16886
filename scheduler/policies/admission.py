"""SLO-aware admission: predict a realtime job's TTFT; refuse at once if it would miss.

Prediction, for a job of model M arriving into M's pool of n workers:

    ttft = already waited
         + realtime prefill ahead * prefill_per_token / n          (prefills run in parallel)
         + slot wait                                               (below)
         + own prefill time
         + one decode step of the running batch                    (chunked prefill shares
                                                                    the step with decode)
         + adapter_load_s, for a LoRA adapter no worker of M holds (loaded or loading)

Realtime prefill ahead is what is queued in the policy and what was assigned to the pool's
engines without its first token yet (``Pool.rt_engine_prefill``, fed by
``SchedulingPolicy.on_first_token``): the policy places realtime at once, so under a burst
the queue is inside the engines, and a prediction blind to it admits the whole burst.

Batch holds no slot against realtime (it can be preempted), so the slot wait is zero while
realtime in flight plus realtime queued ahead fits the pool's slots. Beyond that the job waits
for realtime to finish: with p jobs ahead of it past capacity, about p * mean realtime service
/ total slots. The queue ahead is its tenant's share of it: the policy serves backlogged
tenants by weighted fair share, so a job waits behind its own tenant's queued jobs and, of
each other tenant j's, at most (own + 1) * w_j / w (scheduler.outlook.fair_ahead). One
tenant's flood then lengthens its own predicted wait, and a quiet tenant is not refused
for it. The mean realtime service is learned from finished jobs (tokens, through the
worker's cost model), so the prediction follows the workload.

Flex work is shed first: when a realtime job of M is refused, every queued flex job of M is
refused in the same pass (ahead of it in the decision list), and new flex work for M is
refused for ``overload_hold_s``.

A realtime job too large for any worker of M is refused at once; one whose model no worker
serves yet waits (a worker may be starting) and the API's timeout bounds the wait.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

from scheduler.cost_model import CostModel
from scheduler.outlook import (
    FREES_LISTED,
    Backlog,
    RealtimeOutlook,
    alone_ttft,
    own_start_s,
    predict_new_ttft,
    predict_new_wait,
    summarize_backlog,
    warm_listing,
)
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fleet import Fleet
from scheduler.policies.pool import Pool
from scheduler.policies.waiting import WaitingJobs
from scheduler.policies.workers import kv_need
from scheduler.types import Decision, JobClass, JobView, Reject

# The moving averages' weight once past their first jobs (each of which weighs 1/n).
SIZE_WEIGHT = 0.05
PACE_MAX = 8.0  # the observed pace is believed within this factor of the profile's


@dataclass(slots=True)
class ServiceEstimate:
    """Running means of realtime job sizes, for the slot-wait term. The first jobs weigh in
    fully (1/n, then a 5% moving average), so the estimate leaves its prior after one job,
    not dozens; and what arrivals ask bounds the answers, which never run past max_tokens:
    a cold pool's burst of short requests is not judged by a long prior and refused."""

    prompt_tokens: float = 256.0
    output_tokens: float = 128.0
    asked_tokens: float = math.inf  # mean max_tokens of recent realtime arrivals
    done: int = 0
    asked: int = 0
    # How long realtime jobs held their slot (assigned -> finished) over what the cost
    # profile gives for their size: an engine slower than its profile, or prefill chunks
    # interleaved with decode, hold slots longer, and the slot wait counted by the profile
    # alone admitted jobs that then waited a second past their target.
    pace: float = 1.0
    timed: int = 0

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        self.done += 1
        w = max(SIZE_WEIGHT, 1 / self.done)
        self.prompt_tokens = (1 - w) * self.prompt_tokens + w * prompt_tokens
        self.output_tokens = (1 - w) * self.output_tokens + w * output_tokens

    def observe_time(self, held_s: float, profile_s: float) -> None:
        """A realtime job held its slot ``held_s``; the profile gives ``profile_s`` for it."""
        if profile_s <= 0 or held_s <= 0:
            return
        self.timed += 1
        w = max(SIZE_WEIGHT, 1 / self.timed)
        ratio = min(PACE_MAX, max(1 / PACE_MAX, held_s / profile_s))
        self.pace = (1 - w) * self.pace + w * ratio

    def note_asked(self, max_tokens: int) -> None:
        self.asked += 1
        if self.asked == 1:
            self.asked_tokens = float(max_tokens)
            return
        w = max(SIZE_WEIGHT, 1 / self.asked)
        self.asked_tokens = (1 - w) * self.asked_tokens + w * max_tokens

    @property
    def expected_output(self) -> float:
        return min(self.output_tokens, self.asked_tokens)

    def service_s(self, cost: CostModel, batch: int) -> float:
        """One mean realtime job's time in its slot at ``batch``, at the pace observed."""
        return self.pace * cost.service_s(int(self.prompt_tokens), int(self.expected_output),
                                          batch)


def pool_outlook(model: str, pool: Pool, now: float, cost: CostModel, mean: ServiceEstimate,
                 backlog: tuple[Backlog, ...] = (), adapter_load_s: float = 0.0,
                 deadlines: tuple[tuple[str, float, float], ...] = (),
                 rt_frees_s: tuple[float, ...] | None = None) -> RealtimeOutlook:
    """What a new realtime job of the pool would wait behind: the numbers both the policy
    (``predict_ttft``) and the API's door (scheduler.outlook) predict from. With
    ``adapter_load_s``, the adapters the pool's workers hold are listed, and a job for
    another waits that long for its load; without, adapters are not counted.
    ``rt_frees_s``: the in-flight realtime jobs' expected ends (``expected_frees``) when
    the caller has them at hand for this ``now``; else counted here."""
    warm: tuple[str, ...] = ()
    warm_all = True
    if adapter_load_s > 0:
        warm, warm_all = warm_listing(
            [list(reversed(ws.adapters.ledger.ready_at)) for ws in pool.workers.values()])
    batch = pool_batch(pool)
    ctx = batch * (int(mean.prompt_tokens) + int(mean.expected_output) // 2)
    service_s = mean.service_s(cost, batch)
    if rt_frees_s is None:
        rt_frees_s = expected_frees(pool, now, service_s)
    return RealtimeOutlook(
        model=model, at=now, workers=len(pool.workers), slots_total=pool.slots_total,
        rt_load=pool.rt_inflight + pool.rt_queued, rt_queued_prefill=rt_prefill_ahead(pool),
        mean_prompt_tokens=mean.prompt_tokens, job_service_s=service_s,
        step_s=cost.step_s(batch, ctx, 0), prefill_per_token_s=cost.prefill_per_token_s,
        prefill_step_s=cost.step_base_s, token_budget=cost.token_budget,
        rt_queued=pool.rt_queued, rt_engine_prefill=pool.rt_engine_prefill, backlog=backlog,
        warm_adapters=warm, warm_adapters_all=warm_all, adapter_load_s=adapter_load_s,
        deadlines=deadlines, rt_frees_s=rt_frees_s)


def pool_batch(pool: Pool) -> int:
    """The batch size the pool's jobs run at, as the outlook judges by."""
    return max(1, math.ceil(pool.mean_used()))


def expected_frees(pool: Pool, now: float, service_s: float) -> tuple[float, ...]:
    """When the pool's in-flight realtime jobs are expected to end, seconds from ``now``, the
    soonest FREES_LISTED: each one mean job's service after it was assigned (0 if past)."""
    ends = (max(0.0, item.assigned_at + service_s - now)
            for ws in pool.workers.values() for item in ws.jobs.values() if item.is_realtime)
    return tuple(heapq.nsmallest(FREES_LISTED, ends))


def held_anywhere(pool: Pool, adapter: str) -> bool:
    """Whether some worker of the pool holds the adapter (loaded or loading)."""
    return any(ws.adapters.ledger.holds(adapter) for ws in pool.workers.values())


def predict_ttft(
    job: JobView, pool: Pool, now: float, cost: CostModel, mean: ServiceEstimate,
    backlog: tuple[Backlog, ...] | None = None,
) -> float:
    """The queued ``job``'s predicted TTFT: what it waited, and what the pool's outlook
    without it predicts for it. With ``backlog`` (the pool's queue by tenant, the job
    included), only what fair share serves ahead of it counts; without, all of it."""
    return _predict_from(outlook_without(job, pool, now, cost, mean), job, now, backlog)


def outlook_without(job: JobView, pool: Pool, now: float, cost: CostModel,
                    mean: ServiceEstimate, rt_frees_s: tuple[float, ...] | None = None
                    ) -> RealtimeOutlook:
    """The pool's outlook less the queued ``job`` itself (no backlog: ``_predict_from`` adds
    it, only where fair share is asked for)."""
    o = pool_outlook(job.model, pool, now, cost, mean, rt_frees_s=rt_frees_s)
    return replace(o, rt_load=max(0, o.rt_load - 1), rt_queued=max(0, o.rt_queued - 1),
                   rt_queued_prefill=max(0, o.rt_queued_prefill - job.prompt_tokens))


def _predict_from(o: RealtimeOutlook, job: JobView, now: float,
                  backlog: tuple[Backlog, ...] | None, due_in_s: float | None = None) -> float:
    """With ``due_in_s`` (the job's first-token deadline from now) and the outlook's
    ``deadlines``, of the other tenants' queues only their jobs due first count (EDF)."""
    tenant = None
    if backlog is not None:
        o, tenant = replace(o, backlog=_without(backlog, job.tenant_id)), job.tenant_id
    waited = max(0.0, now - job.arrival)
    return waited + predict_new_ttft(o, prompt_tokens=job.prompt_tokens, tenant=tenant,
                                     weight=job.tenant_weight, adapter=job.adapter,
                                     due_in_s=due_in_s)


def _without(backlog: tuple[Backlog, ...], tenant: str) -> tuple[Backlog, ...]:
    """The backlog less one job of ``tenant`` (the one being judged)."""
    return tuple((t, q - 1 if t == tenant else q, w) for t, q, w in backlog)


def rt_prefill_ahead(pool: Pool) -> int:
    """Realtime prompt tokens a new realtime job of the pool waits behind: queued in the
    policy, and assigned to an engine that has not produced their first token."""
    return pool.rt_queued_prefill + pool.rt_engine_prefill


def retry_after_s(predicted_s: float, slo_s: float, floor_s: float) -> float:
    """Come back once the excess queue has drained: the predicted overshoot, at least floor."""
    return max(floor_s, math.ceil(predicted_s - slo_s))


class Admission:
    """Judges the jobs that arrived since the last pass, at the start of the next one. A
    refused job leaves the queue; the rest wait for placement."""

    def __init__(self, config: FairwayConfig, fleet: Fleet, waiting: WaitingJobs) -> None:
        self.config = config
        self._fleet = fleet
        self._waiting = waiting
        self._new_realtime: list[str] = []
        self._new_flex: list[str] = []
        self._overloaded_until: dict[str, float] = {}  # model -> end of its flex refusal
        self.realtime_size = ServiceEstimate()
        # model -> ((now, its workers' load versions), in-flight realtime ends)
        self._frees_at: dict[str, tuple[tuple[float, int], tuple[float, ...]]] = {}

    def note_arrival(self, job: JobView) -> None:
        if job.job_class is JobClass.REALTIME:
            self._new_realtime.append(job.job_id)
            if not job.requeued:  # asked once, however often it comes back
                self.realtime_size.note_asked(job.max_tokens)
        elif job.priority == self.config.flex_priority:
            self._new_flex.append(job.job_id)

    def note_realtime_done(self, prompt_tokens: int, output_tokens: int, model: str,
                           held_s: float) -> None:
        """A realtime job of ``model`` finished, having held its slot ``held_s``."""
        self.realtime_size.observe(prompt_tokens, output_tokens)
        pool = self._fleet.pools.get(model)
        if pool is not None:
            cost = pool.cost or self.config.default_cost
            self.realtime_size.observe_time(
                held_s, cost.service_s(prompt_tokens, output_tokens, pool_batch(pool)))

    def admit(self, now: float) -> list[Decision]:
        """The refusals for the jobs noted since the last call, in the order they apply."""
        out: list[Decision] = []
        for job_id in self._new_flex:
            model = self._waiting.model_of(job_id)
            if model is not None and self._overloaded_until.get(model, -1.0) > now:
                self._reject(job_id, "flex_overload", self.config.overload_hold_s, out)
        self._new_flex.clear()
        for job_id in self._new_realtime:
            job = self._waiting.get(job_id)
            if job is not None:
                self._admit_realtime(job, now, out)
        self._new_realtime.clear()
        return out

    def outlook(self, now: float) -> list[RealtimeOutlook]:
        """For each model's pool, what a new realtime job would wait (the numbers
        ``predict_ttft`` uses), for admission at the API's door."""
        out = []
        for model, pool in self._fleet.pools.items():
            if not pool.workers:
                continue
            backlog = summarize_backlog(self._waiting.backlog(model))
            out.append(pool_outlook(model, pool, now, pool.cost or self.config.default_cost,
                                    self.realtime_size, backlog,
                                    pool.adapter_load_s(self.config.adapter_load_s),
                                    self._deadlines(model, backlog, now)))
        return out

    def _admit_realtime(self, job: JobView, now: float, out: list[Decision]) -> None:
        cfg = self.config
        pool = self._fleet.pools.get(job.model)
        if pool is None or not pool.workers or job.requeued:
            return
        if kv_need(job) > pool.kv_capacity_max:
            self._reject(job.job_id, "no_capacity_for_model", 30.0, out)
            return
        cost = pool.cost or cfg.default_cost
        outlook = outlook_without(job, pool, now, cost, self.realtime_size,
                                  self._frees(job.model, pool, now, cost))
        if job.adapter is not None and not held_anywhere(pool, job.adapter):
            # counts its load, as the pool's engines measured it
            outlook = replace(outlook, adapter_load_s=pool.adapter_load_s(cfg.adapter_load_s))
        if job.max_wait_s is not None:
            self._admit_queued(job, job.max_wait_s, now, outlook, out)
            return
        slo = cfg.ttft_slo(job.priority, job.ttft_slo_s)
        bar = slo * (1 + cfg.admission_tolerance)
        # Fair share can only shorten the wait: the whole queue ahead first (O(1)), and the
        # tenant's share of it (O(tenants queued)) only when that would refuse.
        predicted = _predict_from(outlook, job, now, None)
        if predicted <= bar:
            return
        backlog = tuple(self._waiting.backlog(job.model))
        # EDF, as the door judges it: a premium job overtakes a standard tenant's queue, and
        # judged by all of it the dispatcher refused premium jobs the door had let in.
        predicted = _predict_from(self._with_deadlines(outlook, backlog, now), job, now,
                                  backlog, due_in_s=job.arrival + slo - now)
        if predicted <= bar:
            return
        if cost.prefill_s(job.prompt_tokens) + cost.step_s(1, job.prompt_tokens, 0) > slo:
            return  # it misses even on an idle pool: refusing it would relieve nothing
        self._refuse_realtime(job, "ttft_slo_unreachable",
                              retry_after_s(predicted, slo, cfg.min_retry_after_s), now, out)

    def _admit_queued(self, job: JobView, max_wait_s: float, now: float,
                      outlook: RealtimeOutlook, out: list[Decision]) -> None:
        """A plan's ``queue`` mode: the job waits (its TTFT target only orders work) unless
        its predicted wait before its prefill starts, what it waited included, is past the
        plan's budget, or its first token would come past its deadline."""
        backlog = tuple(self._waiting.backlog(job.model))
        o = replace(self._with_deadlines(outlook, backlog, now),
                    backlog=_without(backlog, job.tenant_id))
        waited = max(0.0, now - job.arrival)
        slo = self.config.ttft_slo(job.priority, job.ttft_slo_s)
        wait = waited + predict_new_wait(o, tenant=job.tenant_id, weight=job.tenant_weight,
                                         adapter=job.adapter,
                                         due_in_s=job.arrival + slo - now)
        if wait > max_wait_s:
            retry = retry_after_s(wait, max_wait_s, self.config.min_retry_after_s)
            self._refuse_realtime(job, "queue_wait_exceeded", retry, now, out)
            return
        first_token = job.arrival + wait + own_start_s(o, job.prompt_tokens)
        if (job.deadline is not None and first_token > job.deadline
                and job.arrival + alone_ttft(o, prompt_tokens=job.prompt_tokens)
                <= job.deadline):
            retry = retry_after_s(first_token, job.deadline, self.config.min_retry_after_s)
            self._refuse_realtime(job, "deadline_unreachable", retry, now, out)

    def _frees(self, model: str, pool: Pool, now: float, cost: CostModel
               ) -> tuple[float, ...]:
        """The pool's in-flight realtime ends, counted once per pass (judging each arrival
        of a burst would count them again, O(arrivals x jobs in flight))."""
        key = (now, sum(ws.load_version for ws in pool.workers.values()))
        cached = self._frees_at.get(model)
        if cached is None or cached[0] != key:
            service_s = self.realtime_size.service_s(cost, pool_batch(pool))
            cached = self._frees_at[model] = (key, expected_frees(pool, now, service_s))
        return cached[1]

    def _with_deadlines(self, o: RealtimeOutlook, backlog: tuple[Backlog, ...], now: float
                        ) -> RealtimeOutlook:
        """The outlook with when each backlogged tenant's queued jobs are due (EDF)."""
        return replace(o, deadlines=self._deadlines(o.model, backlog, now))

    def _deadlines(self, model: str, backlog: tuple[Backlog, ...], now: float
                   ) -> tuple[tuple[str, float, float], ...]:
        """When each named tenant of ``backlog`` has its queued jobs due (the summed rest,
        named "", has no span)."""
        return self._waiting.deadlines(model, [t for t, _, _ in backlog if t], now)

    def _refuse_realtime(self, job: JobView, reason: str, retry: float, now: float,
                         out: list[Decision]) -> None:
        """Refuse a realtime job the pool cannot take, shedding the model's queued flex work
        first and new flex work for ``overload_hold_s``."""
        hold = self.config.overload_hold_s
        for flex_id in self._waiting.flex_ids(job.model):
            self._reject(flex_id, "flex_shed", hold, out)
        self._overloaded_until[job.model] = now + hold
        self._reject(job.job_id, reason, retry, out)

    def _reject(self, job_id: str, reason: str, retry_after: float, out: list[Decision]) -> None:
        if self._waiting.withdraw(job_id) is not None:
            self._waiting.clear_escalated(job_id)
            out.append(Reject(job_id, reason, retry_after))
