"""The autoscaler's inputs, read by the active dispatcher, and its answer exported per model
(``fairway_desired_workers{model_name, reason}`` and the inputs; KEDA scales each model's
workers on it, docs/deploy.md "Autoscaling").

Realtime demand comes from the policy (the outlook it publishes to the door: live workers,
slots, realtime in flight and queued, the predicted TTFT) and from the realtime jobs that
ended in the last minute (their tokens priced by the cost profile: the engine time realtime
took per second, a measured rate rather than a guess). Batch demand is every open batch job
(queued, assigned or running) by model and deadline minute, read every 30 s: its prompt
(estimated as the door does, ~4 characters a token) and its ``max_tokens`` scaled by the
share of ``max_tokens`` recent batch jobs of the model really produced. How long each model
has gone without traffic (nothing queued, running or ended in the last minute) is kept
between reads (``Idleness``; realtime traffic only), so that a model idle past
``idle_after_s`` can go to zero.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from scheduler.autoscale import (
    AutoscaleConfig,
    BatchDue,
    Demand,
    Desired,
    batch_work_s,
    desired_workers,
    realtime_busy_s,
)
from scheduler.cost_model import DEFAULT_COST, CostModel
from scheduler.outlook import RealtimeOutlook, predict_new_ttft
from scheduler.tiers import DEFAULT_TIER

RECENT_S = 60.0  # the window of ended jobs that measures realtime's rate

BATCH_REFRESH_S = 30.0  # the backlog's read: it sizes every open batch request

# Open batch jobs by model, whether queued and deadline minute (batch lines of one batch share
# a deadline, so this is a handful of rows however long the backlog). Batch without a deadline
# is due 24 h after it arrived, as the policy takes it (docs/scheduler.md). It reads every open
# batch request's size, so it runs every BATCH_REFRESH_S, not every refresh: deadlines are
# minutes to days away, and a new backlog waits at most that long to be counted.
OPEN_BATCH_SQL = text(
    "SELECT model, status = 'queued' AS waiting, "
    "date_trunc('minute', coalesce(deadline_at, created_at + interval '24 hours')) AS due, "
    "count(*), sum(octet_length(request::text)) / 4, sum(max_tokens) FROM jobs "
    "WHERE kind = 'batch' AND status IN ('queued', 'assigned', 'running') GROUP BY 1, 2, 3")
# Realtime jobs waiting for a worker, by model: what wakes a model with none.
REALTIME_WAITING_SQL = text(
    "SELECT model, count(*) FROM jobs WHERE status = 'queued' AND kind = 'realtime' "
    "GROUP BY model")
# Ended jobs of the last RECENT_S (the partial index on finished_at serves it).
RECENT_SQL = text(
    "SELECT model, kind, count(*), sum(coalesce(prompt_tokens, 0)), "
    "sum(coalesce(completion_tokens, 0)), sum(max_tokens) FROM jobs "
    "WHERE finished_at > now() - make_interval(secs => :window) GROUP BY 1, 2")


@dataclass(frozen=True, slots=True)
class OpenRow:
    model: str
    kind: str  # realtime | batch
    waiting: bool  # queued, not on a worker
    due: dt.datetime
    jobs: int
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class RecentRow:
    model: str
    kind: str
    jobs: int
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int


class Idleness:
    """Since when each model has had no realtime traffic, from the demands read at each
    refresh (batch work is not traffic here: its deadline says when it needs a worker). A
    model not yet seen busy counts from the first refresh: a dispatcher that just took over
    holds a model warm for the idle period before it lets it go to zero."""

    def __init__(self) -> None:
        self._busy_at: dict[str, float] = {}
        self._since: float | None = None

    def note(self, d: Demand, *, recent: bool, clock: float) -> Demand:
        """``d`` with its ``idle_s``; ``recent``: realtime jobs of the model ended in the
        last RECENT_S."""
        if self._since is None:
            self._since = clock
        if recent or d.rt_waiting or d.rt_inflight:
            self._busy_at[d.model] = clock
        return replace(d, idle_s=clock - self._busy_at.get(d.model, self._since))


class Reader:
    """The dispatcher's reads for the count: the batch backlog at most every
    ``batch_every_s`` (kept between), the rest on every call; and each model's idleness."""

    def __init__(self, batch_every_s: float = BATCH_REFRESH_S) -> None:
        self.batch_every_s = batch_every_s
        self._batch: list[OpenRow] = []
        self._next_batch = 0.0
        self.idleness = Idleness()

    def read(self, session: Session, *, now: dt.datetime, clock: float
             ) -> tuple[list[OpenRow], list[RecentRow]]:
        if clock >= self._next_batch:
            self._next_batch = clock + self.batch_every_s
            self._batch = [OpenRow(str(m), "batch", bool(w), d, int(n), int(p or 0),
                                   int(x or 0))
                           for m, w, d, n, p, x in session.execute(OPEN_BATCH_SQL)]
        waiting = [OpenRow(str(m), "realtime", True, now, int(n), 0, 0)
                   for m, n in session.execute(REALTIME_WAITING_SQL)]
        recent = [RecentRow(str(m), str(k), int(n), int(p or 0), int(c or 0), int(x or 0))
                  for m, k, n, p, c, x in session.execute(RECENT_SQL, {"window": RECENT_S})]
        return self._batch + waiting, recent


def demands(open_rows: Iterable[OpenRow], recent: Iterable[RecentRow],
            outlooks: Iterable[RealtimeOutlook], costs: dict[str, CostModel], *,
            now: dt.datetime, ttft_target_s: float, models: Iterable[str] = (),
            default_cost: CostModel = DEFAULT_COST) -> list[Demand]:
    """Each model's ``Demand`` from the rows, the policy's outlooks and the pools' costs:
    every model seen in any of them, and ``models`` (so a model whose work ended reads idle
    rather than keeping its last count)."""
    by_outlook = {o.model: o for o in outlooks}
    open_rows, recent = list(open_rows), list(recent)
    names = (set(models) | set(by_outlook) | {r.model for r in open_rows}
             | {r.model for r in recent})
    result = []
    for model in sorted(names):
        cost = costs.get(model, default_cost)
        o = by_outlook.get(model)
        rt = [r for r in recent if r.model == model and r.kind == "realtime"]
        busy = sum(realtime_busy_s(cost, r.prompt_tokens, r.completion_tokens)
                   for r in rt) / RECENT_S
        done = [r for r in recent if r.model == model and r.kind == "batch"]
        asked = sum(r.max_tokens for r in done)
        ratio = min(1.0, max(0.05, sum(r.completion_tokens for r in done) / asked)) if asked \
            else 1.0
        rows = [r for r in open_rows if r.model == model]
        due = tuple(BatchDue((r.due - now).total_seconds(),
                             batch_work_s(cost, r.prompt_tokens, r.max_tokens * ratio, r.jobs))
                    for r in rows if r.kind == "batch")
        rt_waiting = sum(r.jobs for r in rows if r.kind == "realtime" and r.waiting)
        result.append(Demand(
            model,
            live_workers=o.workers if o else 0,
            slots_per_worker=(o.slots_total // max(1, o.workers)) if o else cost.max_slots,
            rt_waiting=max(rt_waiting, o.rt_queued if o else 0),
            rt_inflight=(o.rt_load - o.rt_queued) if o else 0,
            rt_busy_s_per_s=busy,
            predicted_ttft_s=(predict_new_ttft(o, prompt_tokens=int(o.mean_prompt_tokens))
                              if o else None),
            ttft_target_s=ttft_target_s,
            batch_due=due,
            batch_waiting=sum(r.jobs for r in rows if r.kind == "batch" and r.waiting),
        ))
    return result


def decide(policy: Any, session: Session, reader: Reader, *, now_epoch: float,
           clock: float, models: Iterable[str], config: AutoscaleConfig) -> list[Desired]:
    """Read and decide for every model: the dispatcher's part, which
    ``scheduler.dispatcher.metrics`` exports. The target is the default tier's TTFT (the
    realtime work most of a pool serves)."""
    now = dt.datetime.fromtimestamp(now_epoch, dt.UTC)
    open_rows, recent = reader.read(session, now=now, clock=clock)
    # The pools' cost models, where the policy keeps pools (the baselines do not).
    fleet = getattr(policy, "fleet", None)
    costs: dict[str, CostModel] = {}
    for model, pool in (getattr(fleet, "pools", None) or {}).items():
        if getattr(pool, "cost", None) is not None:
            costs[model] = pool.cost
    policy_config = getattr(policy, "config", None)
    default_cost = getattr(policy_config, "default_cost", None) or DEFAULT_COST
    target = 1.0
    if policy_config is not None:
        target = float(policy_config.ttft_slo(DEFAULT_TIER, None))
    recent_models = {r.model for r in recent if r.kind == "realtime"}
    # A worker's start (the cold start new workers are counted after) is its profile's.
    return [desired_workers(reader.idleness.note(d, recent=d.model in recent_models,
                                                 clock=clock),
                            replace(config, start_delay_s=costs.get(d.model, default_cost)
                                    .start_s))
            for d in demands(open_rows, recent, policy.outlook(now_epoch), costs, now=now,
                             ttft_target_s=target, models=models, default_cost=default_cost)]

