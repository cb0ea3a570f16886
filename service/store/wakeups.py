"""Every message on Fairway's two wake-up channels, typed, with its one wire format.

- The Postgres NOTIFY channel ``fairway_jobs`` tells the active dispatcher what changed in the
  jobs table. A notification is sent inside the transaction that makes the change, so the
  dispatcher hears of it exactly when the change is visible.
- Each worker's Redis pub/sub control channel (``service.store.keys.control_channel``) carries
  the dispatcher's and the API's commands to that worker.

Senders build dataclasses and call ``encode``/``notify``; receivers ``decode`` and dispatch on
the type. A payload that does not parse decodes to None (logged by the receiver), never an
exception in a loop that must keep running.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, String, TextClause, bindparam, func, text

CHANNEL = "fairway_jobs"  # the Postgres NOTIFY channel the dispatcher LISTENs on


# -- the NOTIFY channel (to the dispatcher) ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class JobQueued:
    """A new job is queued (the API's insert). Wire: ``new:<job>``, or with tracing on
    ``new:<job>:<traceparent>`` (the W3C header of the insert's span: the dispatcher's hops
    continue the request's trace, service.store.tracing)."""

    job_id: uuid.UUID
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class PlacedView:
    """What the dispatcher's policy needs of a placed job that its row holds only by joins or
    by parsing its body: carried in the NOTIFY so the dispatcher books the job without
    reading it back (a busy dispatcher's per-job read was the express path's cost).
    ``arrival``: the API's clock (epoch s) at the insert."""

    tenant_id: uuid.UUID
    tenant_weight: float
    priority: int
    model: str
    arrival: float
    deadline: float | None
    max_tokens: int
    prompt_estimate: int
    prefix_key: str | None
    prefix_tokens: int
    ttft_target_s: float | None
    attempt: int
    max_wait_s: float | None = None  # its plan queues: the wait budget it was admitted with


@dataclass(frozen=True, slots=True)
class JobPlaced:
    """A new realtime job was placed at insert with an express ticket: it is assigned to
    ``worker_id`` already, and ``view`` is what the dispatcher's policy needs of it. Wire:
    ``placedv:<job>:<ticket>:<traceparent or empty>:<JSON of the worker and the view>``."""

    job_id: uuid.UUID
    worker_id: str
    ticket: str
    traceparent: str | None
    view: PlacedView


@dataclass(frozen=True, slots=True)
class JobEnded:
    """A worker wrote a job's final row; its slot is free and its real usage known.
    Wire: ``done:<job>:<worker>:<prompt tokens>:<completion tokens>``."""

    job_id: uuid.UUID
    worker_id: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JobParked:
    """A preempted job parked its checkpoint and is queued again.
    Wire: ``requeue:<job>:<worker>:<checkpointed tokens>``."""

    job_id: uuid.UUID
    worker_id: str
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class JobCancelled:
    """A job was cancelled (client gone, admin, batch cancel or expiry). Wire: ``cancel:<job>``."""

    job_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Rescan:
    """Many jobs appeared at once (a batch's COPY): rescan the queue. Wire: ``scan``."""


Wakeup = JobQueued | JobPlaced | JobEnded | JobParked | JobCancelled | Rescan


def encode(message: Wakeup) -> str:
    match message:
        case JobQueued(job_id, None):
            return f"new:{job_id}"
        case JobQueued(job_id, traceparent):
            return f"new:{job_id}:{traceparent}"
        case JobPlaced(job_id, worker_id, ticket, traceparent, view):
            return f"placedv:{job_id}:{ticket}:{traceparent or ''}:{_view_json(worker_id, view)}"
        case JobEnded(job_id, worker_id, prompt, completion):
            return f"done:{job_id}:{worker_id}:{prompt}:{completion}"
        case JobParked(job_id, worker_id, generated):
            return f"requeue:{job_id}:{worker_id}:{generated}"
        case JobCancelled(job_id):
            return f"cancel:{job_id}"
        case Rescan():
            return "scan"
    raise TypeError(f"not a wake-up: {message!r}")


def decode(payload: str) -> Wakeup | None:
    """The message back, or None when the payload is not one of ours."""
    op, _, rest = payload.partition(":")
    try:
        if op == "new":  # a traceparent has no ':' (W3C: hex fields joined by '-')
            job, _, traceparent = rest.partition(":")
            return JobQueued(uuid.UUID(job), traceparent or None)
        if op == "placedv":
            job, ticket, traceparent, body = rest.split(":", 3)
            worker, view = _view_from_json(body)
            if not ticket or not worker:
                return None
            return JobPlaced(uuid.UUID(job), worker, ticket, traceparent or None, view)
        if op == "cancel":
            return JobCancelled(uuid.UUID(rest))
        if op == "scan":
            return Rescan()
        # Worker ids may contain ':' (host:port names): the job id is first, numbers last.
        job, _, tail = rest.partition(":")
        if op == "done":
            worker, prompt, completion = tail.rsplit(":", 2)
            return JobEnded(uuid.UUID(job), worker, int(prompt), int(completion))
        if op == "requeue":
            worker, generated = tail.rsplit(":", 1)
            return JobParked(uuid.UUID(job), worker, int(generated))
    except (ValueError, KeyError, TypeError):  # json.JSONDecodeError is a ValueError
        return None
    return None


def _view_json(worker_id: str, view: PlacedView) -> str:
    return json.dumps({
        "w": worker_id, "t": str(view.tenant_id), "tw": view.tenant_weight, "p": view.priority,
        "m": view.model, "a": view.arrival, "d": view.deadline, "mt": view.max_tokens,
        "pe": view.prompt_estimate, "pk": view.prefix_key, "pt": view.prefix_tokens,
        "s": view.ttft_target_s, "n": view.attempt, "q": view.max_wait_s},
        separators=(",", ":"))


def _view_from_json(body: str) -> tuple[str, PlacedView]:
    v = json.loads(body)
    return str(v["w"]), PlacedView(
        uuid.UUID(v["t"]), float(v["tw"]), int(v["p"]), str(v["m"]), float(v["a"]),
        None if v["d"] is None else float(v["d"]), int(v["mt"]), int(v["pe"]),
        None if v["pk"] is None else str(v["pk"]), int(v["pt"]),
        None if v["s"] is None else float(v["s"]), int(v["n"]),
        None if v["q"] is None else float(v["q"]))


def notify(message: Wakeup) -> tuple[TextClause, dict[str, str]]:
    """``session.execute(*notify(msg))``: the NOTIFY, delivered when the transaction commits."""
    return text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL,
                                                         "payload": encode(message)}


def notify_expr(message: Wakeup) -> ColumnElement[Any]:
    """``pg_notify`` as an expression, to ride in another statement built per call."""
    return func.pg_notify(CHANNEL, encode(message))


# ``pg_notify`` as an expression with the message bound as ``p_wakeup`` (``notify_params``),
# to ride in a statement built once: the API's insert and a worker's end write each carry
# their wake-up in the same round trip.
NOTIFY = func.pg_notify(CHANNEL, bindparam("p_wakeup", type_=String()))


def notify_params(message: Wakeup) -> dict[str, str]:
    return {"p_wakeup": encode(message)}


def notify_all(messages: Iterable[Wakeup]) -> tuple[TextClause, dict[str, Any]]:
    """One statement for many notifications (a bulk cancel)."""
    return (text("SELECT pg_notify(:channel, p) FROM unnest(CAST(:payloads AS text[])) AS p"),
            {"channel": CHANNEL, "payloads": [encode(m) for m in messages]})


# -- a worker's control channel -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AbortJob:
    """Stop this attempt of a job now (it was cancelled); whoever cancelled owns its row."""

    job_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class PreemptJob:
    """Take a running job back: park a checkpoint and queue it again (the dispatcher's choice)."""

    job_id: str


Command = AbortJob | PreemptJob


def encode_command(command: Command) -> str:
    match command:
        case AbortJob(job_id, attempt):
            return json.dumps({"op": "abort", "job_id": job_id, "attempt": attempt})
        case PreemptJob(job_id):
            return json.dumps({"op": "preempt", "job_id": job_id})
    raise TypeError(f"not a worker command: {command!r}")


def decode_command(raw: bytes | str) -> Command | None:
    try:
        body = json.loads(raw)
        if body["op"] == "abort":
            return AbortJob(str(body["job_id"]), int(body["attempt"]))
        if body["op"] == "preempt":
            return PreemptJob(str(body["job_id"]))
    except (ValueError, KeyError, TypeError):
        return None
    return None
