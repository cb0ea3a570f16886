"""Redis key and channel names, in one place. What is stored under them is typed elsewhere:
job streams in service.store.job_stream, control messages in service.store.wakeups, the step
clock in service.store.heartbeats."""

from __future__ import annotations

import uuid


def stream_key(job_id: uuid.UUID | str) -> str:
    return f"fairway:job:{job_id}:events"


def control_channel(worker_id: str) -> str:
    """Redis pub/sub channel on which a worker receives abort commands."""
    return f"fairway:control:{worker_id}"


def worker_key(worker_id: str) -> str:
    return f"fairway:worker:{worker_id}"


WORKER_KEY_PATTERN = "fairway:worker:*"


def step_clock_key(worker_id: str) -> str:
    """A worker's engine step clock (worker.engine.step_clock), for realtime placement."""
    return f"fairway:step:{worker_id}"


def phase_slot_key(model: str, slot: int) -> str:
    """Who holds step phase slot ``slot`` (scheduler.step_phase) among ``model``'s workers."""
    return f"fairway:phase:{model}:{slot}"


# The active dispatcher's heartbeat (service.store.heartbeats.LeaderBeat), for readiness.
LEADER_KEY = "fairway:dispatcher:leader"
LEADER_TTL_S = 5


def outlook_key(model: str) -> str:
    """The dispatcher's realtime outlook for ``model`` (scheduler.outlook), for admission."""
    return f"fairway:outlook:{model}"


OUTLOOK_TTL_S = 3  # an outlook older than this is gone: the API then admits without one


def worker_queue(worker_id: str) -> str:
    """Each worker consumes its own Celery queue, so the dispatcher decides placement."""
    return f"fairway.worker.{worker_id}"


def express_key(model: str) -> str:
    """The express tickets the dispatcher lends the API for ``model`` (a list of
    ``<worker>|<ticket>``, ``encode_ticket``; the API pops one per realtime job it places at
    insert)."""
    return f"fairway:express:{model}"


# An express list lives this long without a rewrite (the dispatcher rewrites it every second
# while it leads), so a dispatcher that stops leading stops lending.
EXPRESS_LIST_TTL_MS = 3_000


def encode_ticket(worker_id: str, ticket: str) -> str:
    """One entry of an ``express_key`` list (split at its last "|": a worker id may hold one)."""
    return f"{worker_id}|{ticket}"


def decode_ticket(raw: bytes | str) -> tuple[str, str] | None:
    """(worker, ticket) of an ``express_key`` entry, or None when it is not one."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    worker_id, _, ticket = text.rpartition("|")
    return (worker_id, ticket) if worker_id and ticket else None


def handoff_stream(worker_id: str) -> str:
    """A worker's realtime hand-off stream (service.store.handoff): the dispatcher adds the
    realtime jobs it placed there, the worker's engine loop reads them (batch goes by Celery)."""
    return f"fairway:handoff:{worker_id}"


HANDOFF_MAXLEN = 1000  # approximate cap per stream; an entry trimmed unread waits for its lease



def admin_auth_failures_key(client: str, window: int) -> str:
    """Failed admin-token attempts from ``client`` (an address) in minute ``window`` (epoch
    seconds // 60): every API process counts into it (service.web.admin_guard)."""
    return f"fairway:admin-auth-failures:{client}:{window}"
