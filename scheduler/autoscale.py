"""How many workers a model wants, and why: the autoscaler's rule, pure (plain objects in, a
decision out, no clock but the ``now`` the demand was measured at).

Two demands add up, because batch fills what realtime leaves idle on the same workers:

- **realtime**: the engine time realtime arrivals need per second (``rt_busy_s_per_s``, from
  the recent arrivals' tokens priced by the cost profile), kept below ``rt_busy_target`` of a
  worker so that arrivals rarely queue behind each other; at least enough workers to hold the
  realtime jobs in flight within ``rt_slot_target`` of their slots; and one more than now when
  the outlook's predicted TTFT is already past ``ttft_high`` of the target (the prediction
  sees a burst before any rate does).
- **batch against deadlines**: the queued batch work (engine seconds, ``batch_work_s``) due by
  each deadline must fit before it, counting that a worker asked for now only starts working
  after ``start_delay_s`` (its model load). A backlog due in a week needs a fraction of a
  worker; the same backlog due in an hour needs many.

A model may scale to zero (``min_workers`` 0):

- realtime work waiting for a model with no live worker asks for one (``wake``): the first
  request is what brings a scaled-to-zero model back (it waits in the API's waiting room
  meanwhile);
- batch work for a model at zero wakes it only once it is due: when what is queued, run on
  one worker after its start, would leave less than ``batch_wake_slack_s`` (or the work's own
  length, if longer) before its deadline. A backlog due in a week does not hold a GPU all
  week; one due in an hour wakes the model at once;
- a model that had realtime traffic within ``idle_after_s`` keeps one worker (``warm``), so
  that a quiet minute between requests does not cost the next one a cold start; past it,
  with nothing due, it asks for zero (``idle``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduler.cost_model import CostModel

REALTIME, BATCH_DEADLINE, WAKE, WARM, IDLE, MIN_WORKERS = (
    "realtime", "batch_deadline", "wake", "warm", "idle", "min_workers")
REASONS = (REALTIME, BATCH_DEADLINE, WAKE, WARM, IDLE, MIN_WORKERS)


@dataclass(frozen=True, slots=True)
class BatchDue:
    """Queued batch work of one model due by one deadline."""

    due_in_s: float  # from now to the deadline (negative: already late)
    work_s: float  # engine seconds on one worker at batch throughput (``batch_work_s``)


@dataclass(frozen=True, slots=True)
class Demand:
    """What a model's pool faces now."""

    model: str
    live_workers: int  # serving now (a starting worker is not live)
    slots_per_worker: int
    rt_waiting: int = 0  # realtime jobs queued, not yet on a worker
    rt_inflight: int = 0  # realtime jobs on workers
    rt_busy_s_per_s: float = 0.0  # engine seconds of realtime work arriving per second
    predicted_ttft_s: float | None = None  # a new realtime job's, from the outlook
    ttft_target_s: float = 1.0
    batch_due: tuple[BatchDue, ...] = ()
    batch_waiting: int = 0  # batch jobs queued (only to say "not idle")
    # Since the model's last realtime traffic (queued, running or ended; batch work is judged
    # by its deadlines instead); None: unknown, which holds nothing warm.
    idle_s: float | None = None


@dataclass(frozen=True, slots=True)
class AutoscaleConfig:
    min_workers: int = 0
    max_workers: int = 8
    start_delay_s: float = 120.0  # from asking for a worker to its first step (model load)
    # Realtime's share of a worker's engine time, at most (decode priced at 128 wide). In the
    # simulator one H200 at ~0.67 of it met a 1 s TTFT target at p99 0.34 s (bench/autoscale.py).
    rt_busy_target: float = 0.8
    rt_slot_target: float = 0.8  # realtime jobs in flight per slot, at most
    ttft_high: float = 0.7  # predicted TTFT past this share of the target: one more worker
    # Batch may use this share of the time up to a deadline (the rest is margin for
    # realtime bursts taking the workers back and for output longer than measured).
    batch_share: float = 0.8
    # A deadline closer than this still gets this much time: asking for the whole backlog
    # in one second would ask for max_workers and finish nothing sooner.
    min_window_s: float = 60.0
    # A model with traffic this recently keeps one worker (0: none kept once idle).
    idle_after_s: float = 0.0
    # A model at zero wakes for batch work once the slack to its deadline (after a worker's
    # start and the work on one worker) is below this, or below the work's own length.
    batch_wake_slack_s: float = 1800.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_workers <= self.max_workers:
            raise ValueError("need 0 <= min_workers <= max_workers")
        for name in ("rt_busy_target", "rt_slot_target", "ttft_high", "batch_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1]")
        if self.idle_after_s < 0 or self.batch_wake_slack_s < 0:
            raise ValueError("idle_after_s and batch_wake_slack_s must be >= 0")


@dataclass(frozen=True, slots=True)
class Desired:
    model: str
    workers: int  # bounded by min_workers and max_workers
    reason: str  # one of REASONS
    realtime_workers: float  # what realtime alone asks for (unbounded, fractional)
    batch_workers: float  # what the batch deadlines alone ask for
    capped: bool = False  # the demand asked for more than max_workers
    inputs: dict[str, float] = field(default_factory=dict)


def desired_workers(d: Demand, config: AutoscaleConfig) -> Desired:
    rt = realtime_workers(d, config)
    batch = batch_workers(d, config)
    if d.live_workers == 0 and not batch_due_now(d, config):
        batch = 0.0  # the backlog can wait for its deadline's turn at zero workers
    wanted = math.ceil(rt + batch - 1e-9)
    reason = IDLE if wanted == 0 else BATCH_DEADLINE if batch > rt else REALTIME
    if d.live_workers == 0 and (d.rt_waiting > 0 or batch > 0) and wanted <= 1:
        # Nobody serves the model and work waits for it: the first worker is that work's.
        wanted, reason = 1, WAKE
    if wanted == 0 and d.idle_s is not None and d.idle_s < config.idle_after_s:
        wanted, reason = 1, WARM
    bounded = min(config.max_workers, max(config.min_workers, wanted))
    if bounded > wanted:
        reason = MIN_WORKERS
    return Desired(d.model, bounded, reason, rt, batch, capped=wanted > config.max_workers,
                   inputs={"rt_busy_s_per_s": d.rt_busy_s_per_s,
                           "rt_inflight": float(d.rt_inflight),
                           "rt_waiting": float(d.rt_waiting),
                           "batch_work_s": sum(b.work_s for b in d.batch_due)})


def realtime_workers(d: Demand, config: AutoscaleConfig) -> float:
    """Workers realtime asks for: the largest of its engine time, its slots and, when the
    outlook already predicts a late first token, one more than now."""
    by_busy = d.rt_busy_s_per_s / config.rt_busy_target
    by_slots = (d.rt_inflight + d.rt_waiting) / max(1.0, d.slots_per_worker
                                                     * config.rt_slot_target)
    need = max(by_busy, by_slots)
    if (d.predicted_ttft_s is not None and d.live_workers > 0
            and d.predicted_ttft_s > config.ttft_high * d.ttft_target_s):
        need = max(need, d.live_workers + 1.0)
    return need


def batch_due_now(d: Demand, config: AutoscaleConfig) -> bool:
    """Must a model at zero wake for its batch work now? Yes once, for some deadline, the
    work due by it (and before it), run on one worker that starts now, would end less than
    ``batch_wake_slack_s`` (or that work's own length, if longer) before it."""
    cumulative = 0.0
    for due in sorted(d.batch_due, key=lambda b: b.due_in_s):
        cumulative += due.work_s
        work = cumulative / config.batch_share
        slack = due.due_in_s - config.start_delay_s - work
        if slack < max(config.batch_wake_slack_s, work):
            return True
    return False


def batch_workers(d: Demand, config: AutoscaleConfig) -> float:
    """The fewest workers (fractional) that finish each deadline's batch work, and all due
    before it, by that deadline.

    With L workers live and n >= L asked for, by a deadline T away the pool works
    L * T + (n - L) * (T - start) engine seconds, start being a new worker's load; so n must
    be at least (W - L * start) / (T - start) for the work W due by T (W over
    ``batch_share``). Where T is no later than a new worker could start, new ones come too
    late for that deadline; the work over T is still asked for, so that what follows it is
    not late too."""
    need = 0.0
    cumulative = 0.0
    start = config.start_delay_s
    live = d.live_workers
    for due in sorted(d.batch_due, key=lambda b: b.due_in_s):
        cumulative += due.work_s
        window = max(due.due_in_s, config.min_window_s)
        work = cumulative / config.batch_share
        by_live = work / window  # the busy share of the live workers it takes
        if by_live <= live or window <= start:
            need = max(need, by_live)
        else:
            need = max(need, (work - live * start) / (window - start))
    return need


def batch_work_s(cost: CostModel, prompt_tokens: float, output_tokens: float,
                 jobs: int = 1) -> float:
    """Engine seconds ``jobs`` jobs of these token totals take of a worker running batch at
    full width: their prefill and their share of the decode steps at ``max_slots`` sequences
    (the throughput a worker reaches on a deep batch queue)."""
    width = max(1, cost.max_slots)
    ctx = int(min(cost.kv_capacity_tokens // width,
                  (prompt_tokens + output_tokens / 2) / max(1, jobs)))
    step = cost.step_s(width, width * ctx, 0)
    return prompt_tokens * cost.prefill_per_token_s + output_tokens * step / width


def realtime_busy_s(cost: CostModel, prompt_tokens: float, output_tokens: float,
                    batch: int = 128) -> float:
    """Engine seconds of realtime work of these token totals: their prefill and their share
    of the decode steps at ``batch`` sequences (realtime decodes beside whatever else runs,
    so a token costs its share of a wide step, not of a step of its own; narrower than
    batch's full width, which realtime's time per output token would not bear)."""
    width = max(1, min(batch, cost.max_slots))
    step = cost.step_s(width, width * 1024, 0)
    return prompt_tokens * cost.prefill_per_token_s + output_tokens * step / width
