"""What a new realtime job of a model would wait, as the policy sees the model's pool: the
outlook the dispatcher publishes for the API's admission, so that a request that cannot meet
its TTFT target is refused at the door in milliseconds, not queued past every target.

The prediction is the policy's own (scheduler.policies.admission.predict_ttft), split into
the pool's state (``RealtimeOutlook``, published every pass) and the jobs the API admitted
since (``extra_jobs``), so a burst that arrives between two passes is counted too. It is the
requesting tenant's: the policy serves backlogged tenants by weighted fair share, so one
tenant's flood lengthens its own predicted wait, not a quiet tenant's (``fair_ahead``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

# The prediction is a mean and the target holds the tail: the door admits only below this
# share of the target (service.api.slo_gate; the simulator's door, scheduler.sim.runner).
ADMIT_BELOW = 0.7


# One backlogged tenant of a pool's realtime queue: (tenant id, jobs queued, fair-share weight).
Backlog = tuple[str, int, float]
BACKLOG_LISTED = 64  # tenants listed by name in an outlook; the rest are summed under ""
# Adapters listed as warm in an outlook; past it the list is cut and says so
# (``warm_adapters_all``), and the door adds no load for an adapter it does not list.
WARM_LISTED = 1024
FREES_LISTED = 64  # in-flight realtime jobs' expected ends listed in an outlook


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
    rt_queued: int = 0  # of rt_load, the jobs queued in the policy (not yet assigned)
    rt_engine_prefill: int = 0  # of rt_queued_prefill, the part inside the engines
    # Who the policy's queue holds, most jobs first: the policy serves backlogged tenants by
    # weighted fair share, so a new job waits behind its own tenant's queue and only a
    # weighted share of the others' (``fair_ahead``).
    backlog: tuple[Backlog, ...] = ()
    # LoRA: the adapters some worker of the pool holds (loaded or loading), and what loading
    # one no worker holds adds to a request's wait (FairwayConfig.adapter_load_s; 0: not
    # counted, as in an outlook from before adapters were).
    warm_adapters: tuple[str, ...] = ()
    warm_adapters_all: bool = True  # False: more were warm than listed
    adapter_load_s: float = 0.0
    # When each listed backlogged tenant's queued jobs are due, (tenant, earliest, latest
    # first-token deadline), in seconds after ``at``: the policy orders one priority's
    # tenants by deadline within a fair-share slack (EDF), so a new job waits only behind
    # the queued jobs due before it (``edf_ahead``). Empty: fair share alone (and an
    # outlook from before this was published).
    deadlines: tuple[tuple[str, float, float], ...] = ()
    # When the soonest-ending realtime jobs in flight are expected to end, seconds after
    # ``at``, soonest first (at most FREES_LISTED; each its start plus ``job_service_s``):
    # jobs that started together free their slots together, not one every
    # job_service_s / slots_total, and a pool filled by one burst frees none for a while.
    # Empty: the even rate alone (and an outlook from before this was published).
    rt_frees_s: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def summarize_backlog(entries: list[Backlog], listed: int = BACKLOG_LISTED
                      ) -> tuple[Backlog, ...]:
    """The ``listed`` tenants with most jobs queued, and the rest as one entry ("") with
    their jobs and weights summed: a bounded outlook however many tenants queue."""
    ranked = sorted(entries, key=lambda e: -e[1])
    rest = ranked[listed:]
    head = tuple(ranked[:listed])
    if not rest:
        return head
    return (*head, ("", sum(e[1] for e in rest), sum(e[2] for e in rest)))


def fair_ahead(backlog: tuple[Backlog, ...] | list[Backlog], *, tenant: str, weight: float,
               own_extra: int = 0, due_s: float | None = None,
               deadlines: tuple[tuple[str, float, float], ...] = ()) -> float:
    """Queued jobs served before a new job of ``tenant`` under weighted fair share (the
    policy's VTC order, scheduler.policies.fairqueue): all of its own tenant's queued jobs,
    and of each other backlogged tenant j at most what j is served while this tenant is
    served its own jobs and the new one, (own + 1) * w_j / w. ``own_extra``: this tenant's
    jobs admitted since the backlog was counted, also ahead. With the new job's deadline
    ``due_s`` and the tenants' ``deadlines`` (``RealtimeOutlook.deadlines``), of another
    tenant's share only its jobs due first (``edf_ahead``): EDF never puts a later one
    ahead, so a tighter target is not judged by a looser tenant's queue."""
    own = sum(q for t, q, _ in backlog if t == tenant)
    rounds = (own + own_extra + 1) / max(weight, 1e-6)
    due = {t: (first, last) for t, first, last in deadlines} if due_s is not None else {}
    ahead = float(own)
    for t, q, w in backlog:
        if t == tenant:
            continue
        share = min(float(q), rounds * w)
        span = due.get(t)
        if span is not None and due_s is not None:
            share = min(share, edf_ahead(q, span[0], span[1], due_s))
        ahead += share
    return ahead


def admitted_ahead(admitted: Iterable[tuple[str, float]], *, tenant: str | None,
                   due_at: float | None) -> int:
    """Of the requests a door admitted since the outlook, each (tenant, first-token deadline),
    those the policy serves before a new one of ``tenant`` due at ``due_at``: its own
    tenant's, and the others' due no later (EDF across tenants); all of them without a
    tenant or deadline. A premium request overtakes the standard ones admitted a moment
    ago, and counting them ahead refused premium far more than its outcomes warranted."""
    if tenant is None or due_at is None:
        return sum(1 for _ in admitted)
    return sum(1 for t, due in admitted if t == tenant or due <= due_at)


def edf_ahead(queued: int, first_s: float, last_s: float, due_s: float) -> float:
    """Of a tenant's ``queued`` jobs, due from ``first_s`` to ``last_s``, those due before
    ``due_s``, the deadlines taken as spread evenly between (they arrive over time)."""
    if due_s >= last_s:
        return float(queued)
    if due_s < first_s:
        return 0.0
    return queued * (due_s - first_s) / (last_s - first_s)


def queue_wait_s(o: RealtimeOutlook, *, ahead: float, extra_jobs: int,
                 elapsed_s: float = 0.0) -> float:
    """The wait before a new job's own prefill: the prefill queued ahead of it, and, past
    the pool's slots, realtime ahead finishing. ``ahead`` of the outlook's ``rt_queued``
    jobs go first; ``extra_jobs`` admitted since the outlook too, and the slots the pool
    freed in the ``elapsed_s`` since it (a full pool frees one every job_service_s / slots)
    make room for them: counting the admissions since an outlook but not the completions
    since over-estimated a busy pool's wait several times over (bench/overload.py)."""
    # No jobs queued in the policy: all of its queued prefill counts as ahead.
    share = ahead / o.rt_queued if o.rt_queued else 1.0
    queued_prefill = o.rt_queued_prefill - o.rt_engine_prefill
    ahead_tokens = o.rt_engine_prefill + queued_prefill * share + extra_jobs * o.mean_prompt_tokens
    queue_s = ahead_tokens * o.prefill_per_token_s / max(1, o.workers)
    inflight = o.rt_load - o.rt_queued
    freed = elapsed_s * o.slots_total / o.job_service_s if o.job_service_s > 0 else 0.0
    past_capacity = inflight + ahead + extra_jobs + 1 - o.slots_total
    slot_wait_s = 0.0
    if past_capacity - freed > 0:
        slot_wait_s = (past_capacity - freed) * o.job_service_s / max(1, o.slots_total)
    return queue_s + max(slot_wait_s, listed_free_s(o, past_capacity, elapsed_s))


def listed_free_s(o: RealtimeOutlook, needed: float, elapsed_s: float = 0.0) -> float:
    """When the ``needed``-th in-flight realtime job is expected to end, from ``elapsed_s``
    after the outlook, by the ends it lists (0 when it lists too few: the even rate then
    judges alone). The longer of this and the even rate counts: after a burst filled the
    pool at once no slot frees until that cohort ends, which the rate would not see, and a
    job past its expected end (listed as 0) may be a long one, which the rate still counts."""
    i = math.ceil(needed)
    if i < 1 or i > len(o.rt_frees_s):
        return 0.0
    return max(0.0, o.rt_frees_s[i - 1] - elapsed_s)


def adapter_load_s(o: RealtimeOutlook, adapter: str | None) -> float:
    """What a job with ``adapter`` waits for its load: ``adapter_load_s`` when no worker of
    the pool holds it (by a complete list), else nothing."""
    if adapter is None or not o.warm_adapters_all or adapter in o.warm_adapters:
        return 0.0
    return o.adapter_load_s


def warm_listing(held: list[list[str]], listed: int = WARM_LISTED
                 ) -> tuple[tuple[str, ...], bool]:
    """The adapters the workers hold (each worker's list most recently used first), at most
    ``listed`` of them, the most recent of each worker first; and whether that is all."""
    seen: dict[str, None] = {}
    depth = max((len(h) for h in held), default=0)
    for i in range(depth):  # round robin: a cut list keeps every worker's most recent
        for h in held:
            if i < len(h):
                seen.setdefault(h[i])
    names = tuple(seen)
    return names[:listed], len(names) <= listed


def predict_new_wait(o: RealtimeOutlook, *, extra_jobs: int = 0, tenant: str | None = None,
                     weight: float = 1.0, own_extra: int = 0, elapsed_s: float = 0.0,
                     adapter: str | None = None, due_in_s: float | None = None) -> float:
    """Predicted wait of a new realtime job before its own prefill starts, with
    ``extra_jobs`` admitted since the outlook was computed queued ahead of it (``own_extra``
    of them its tenant's). With ``tenant``, only the queue fair share puts ahead of it
    counts; without, all of it. With ``adapter``, its load when no worker holds it. With
    ``due_in_s`` (its first-token deadline from now, its plan's TTFT target), only the
    other tenants' jobs due before it (``fair_ahead``)."""
    ahead = float(o.rt_queued)
    if tenant is not None:
        due_s = None if due_in_s is None else elapsed_s + due_in_s
        ahead = min(ahead, fair_ahead(o.backlog, tenant=tenant, weight=weight,
                                      own_extra=own_extra, due_s=due_s,
                                      deadlines=o.deadlines))
    return (queue_wait_s(o, ahead=ahead, extra_jobs=extra_jobs, elapsed_s=elapsed_s)
            + adapter_load_s(o, adapter))


def predict_new_ttft(o: RealtimeOutlook, *, prompt_tokens: int, extra_jobs: int = 0,
                     tenant: str | None = None, weight: float = 1.0, own_extra: int = 0,
                     elapsed_s: float = 0.0, adapter: str | None = None,
                     due_in_s: float | None = None) -> float:
    """Predicted TTFT of a new realtime job of ``prompt_tokens``: its wait
    (``predict_new_wait``, its adapter's load included), its own prefill and one step."""
    wait = predict_new_wait(o, extra_jobs=extra_jobs, tenant=tenant, weight=weight,
                            own_extra=own_extra, elapsed_s=elapsed_s, adapter=adapter,
                            due_in_s=due_in_s)
    return wait + own_start_s(o, prompt_tokens)


def own_start_s(o: RealtimeOutlook, prompt_tokens: int) -> float:
    """From a job's start to its first token: its own prefill and one step of the batch."""
    return _prefill_s(o, prompt_tokens) + o.step_s


@dataclass(frozen=True, slots=True)
class DoorVerdict:
    """The door's judgement of one request: its predicted TTFT, and the Retry-After seconds
    of a refusal (None: admitted)."""

    predicted_ttft_s: float
    retry_after: int | None
    calibration: float = 1.0  # the factor the engine's part of the prediction was scaled by

    @property
    def raw_predicted_s(self) -> float:
        """The prediction as it would have been uncalibrated (what calibration learns on)."""
        return self.predicted_ttft_s / self.calibration


def door_verdict(
    o: RealtimeOutlook, *, prompt_tokens: int, target_s: float, extra_jobs: int = 0,
    admit_below: float = ADMIT_BELOW, tenant: str | None = None, weight: float = 1.0,
    own_extra: int = 0, max_wait_s: float | None = None, api_delay_s: float = 0.0,
    age_s: float = 0.0, elapsed_s: float = 0.0, calibration: float = 1.0,
    adapter: str | None = None, due_in_s: float | None = None,
) -> DoorVerdict:
    """The door's rule, with its prediction.

    Without ``max_wait_s`` (a plan's ``shed`` mode), ``target_s`` is the request's TTFT
    target (or its deadline if sooner) and a request predicted to miss it is refused. With it
    (``queue`` mode), the target is only a goal: the request is refused when its predicted wait
    before its own prefill starts is past ``max_wait_s``, or when it would miss ``target_s``,
    then its deadline. Either way a request that would miss even on an idle pool is admitted:
    refusing it would relieve nothing. ``api_delay_s``: the time the request is expected to
    spend in the API before its job exists (its backlog in a burst), part of its wait.
    ``age_s``: judge as if the pool had since served that much of the wait the outlook
    predicts (an outlook that old: no pool serves more in that time). ``elapsed_s``: the
    time since the outlook was computed, in which the ``extra_jobs`` came and the pool
    freed slots (``queue_wait_s``). ``calibration``: what this model's predictions turned
    out to need multiplying by (scheduler.ttft_calibration), applied to the whole
    prediction, the API's own delay included (it learns on the whole). ``adapter``: the
    request's LoRA adapter; its load counts when no worker of the pool holds it.
    ``due_in_s``: its plan's TTFT target, by which the policy orders it among other tenants'
    jobs (EDF, ``fair_ahead``)."""
    pool_wait = adapter_load_s(o, adapter) + max(0.0, predict_new_wait(
        o, extra_jobs=extra_jobs, tenant=tenant, weight=weight, own_extra=own_extra,
        elapsed_s=elapsed_s, due_in_s=due_in_s) - age_s)
    own = own_start_s(o, prompt_tokens)
    predicted = calibration * (api_delay_s + pool_wait + own)
    # Queue mode judges uncalibrated: the factor is learned on first tokens, which short
    # waits and the own prefill dominate, and scaled long waits by it (queue mode at 2x
    # refused ~200 requests that would have started within 14 s of a 30 s budget).
    scale = calibration if max_wait_s is None else 1.0
    judged = scale * (api_delay_s + pool_wait + own)
    if max_wait_s is not None:
        wait = api_delay_s + pool_wait
        if wait > max_wait_s:
            return DoorVerdict(predicted, max(1, math.ceil(wait - max_wait_s)), calibration)
    bar = target_s * admit_below
    # The idle pool by the profile: a factor learned on loaded first tokens (queueing the
    # outlook under-counts) would make every request look hopeless under load, and let in.
    if judged > bar and alone_ttft(o, prompt_tokens=prompt_tokens) <= bar:
        return DoorVerdict(predicted, max(1, math.ceil(judged - bar)), calibration)
    return DoorVerdict(predicted, None, calibration)


def door_refusal(
    o: RealtimeOutlook, *, prompt_tokens: int, target_s: float, extra_jobs: int = 0,
    admit_below: float = ADMIT_BELOW, tenant: str | None = None, weight: float = 1.0,
    own_extra: int = 0, max_wait_s: float | None = None,
) -> int | None:
    """The door's rule (``door_verdict``) for a request with no API delay: None to admit,
    else the Retry-After seconds of a refusal."""
    return door_verdict(o, prompt_tokens=prompt_tokens, target_s=target_s,
                        extra_jobs=extra_jobs, admit_below=admit_below, tenant=tenant,
                        weight=weight, own_extra=own_extra, max_wait_s=max_wait_s
                        ).retry_after


def alone_ttft(o: RealtimeOutlook, *, prompt_tokens: int) -> float:
    """The request's TTFT on an idle pool: a target below it cannot be met by shedding load."""
    return _prefill_s(o, prompt_tokens) + o.prefill_step_s


def _prefill_s(o: RealtimeOutlook, prompt_tokens: int) -> float:
    chunks = max(1, math.ceil(prompt_tokens / max(1, o.token_budget)))
    return chunks * o.prefill_step_s + prompt_tokens * o.prefill_per_token_s
