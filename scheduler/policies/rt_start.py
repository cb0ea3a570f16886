"""Realtime placement by earliest predicted first token.

Under a batch flood the realtime guard makes a realtime prefill run alone, but only from the
engine's next step: the step in flight when the job arrives (a batch prefill chunk plus every
batch decode, ~25 ms on the H200 profile) cannot be cut short. Workers' steps are out of phase,
so the job waits least on the worker whose step ends first. Each worker's engine reports its
step clock (when the current step started, how long its steps take); between reports the
policy extrapolates whole steps.

    first_token(w) = start(w) + prefill_s(prompt - cached prefix on w)
    start(w) = max(now + lead + residual_w(now + lead), rt_prefill_until_w)
    residual_w(t) = step_s - ((t - started_at) mod step_s)     (0 when idle or unknown)

``lead`` is the time from the decision to the job reaching the engine (dispatch and delivery).
``rt_prefill_until_w`` is when the realtime prefills this policy already sent to ``w`` should
be done (a ledger: each realtime assignment sets it to that job's predicted first token), so
simultaneous arrivals spread instead of queueing behind each other's prefills. The prefix
counts as cached on a worker among whose last ``PREFIX_MEMORY`` realtime jobs it was. Ties
(idle workers) go to the holder of the job's prefix by bounded-load affinity, then to the
worker with the least realtime, then the least loaded (the candidates' order).
"""

from __future__ import annotations

from scheduler.policies.workers import WorkerState
from scheduler.types import JobView

PREFIX_MEMORY = 64  # like an engine's prefix cache: recent keys only


def residual_s(ws: WorkerState, t: float) -> float:
    """Time from ``t`` to the end of the step ``ws``'s engine is running then."""
    started, step = ws.step_started_at, ws.step_s
    if started is None or step <= 0.0:
        return 0.0
    return step - ((t - started) % step)


def predicted_start(ws: WorkerState, now: float, lead_s: float) -> float:
    arrive = now + lead_s
    return max(arrive + residual_s(ws, arrive), ws.rt_prefill_until)


def predicted_first_token(ws: WorkerState, job: JobView, now: float, lead_s: float) -> float:
    hit = job.prefix_tokens if job.prefix_key in ws.rt_prefixes else 0
    tokens = max(1, job.prompt_tokens - hit)
    return predicted_start(ws, now, lead_s) + ws.cost.prefill_s(tokens)


def note_realtime(ws: WorkerState, job: JobView, now: float, lead_s: float) -> None:
    """A realtime job was assigned to ``ws``: its prefill holds the engine until its first
    token, and its prefix is in that engine's cache from then on."""
    ws.rt_prefill_until = predicted_first_token(ws, job, now, lead_s)
    key = job.prefix_key
    if key is not None:
        ws.rt_prefixes[key] = None
        ws.rt_prefixes.move_to_end(key)
        if len(ws.rt_prefixes) > PREFIX_MEMORY:
            ws.rt_prefixes.popitem(last=False)


def earliest_first_token(
    candidates: list[WorkerState],
    job: JobView,
    now: float,
    lead_s: float,
    affine: WorkerState | None,
) -> WorkerState:
    # min() keeps the first of equals, and candidates come least loaded first.
    return min(
        candidates,
        key=lambda ws: (predicted_first_token(ws, job, now, lead_s), ws is not affine, ws.rt_count),
    )
