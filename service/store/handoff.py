"""The realtime hand-off: the message the dispatcher adds to a worker's hand-off stream
(``service.store.keys.handoff_stream``) for each realtime job it placed there, typed, with its
one wire format (a Redis stream entry's fields).

The stream is only the fast path. The job row is the truth: the claim that names the worker
and the attempt is committed before the entry is added, the worker starts the job only through
``lifecycle.start`` for that attempt (a duplicate or stale entry starts nothing), and a job whose
worker dies before or after reading its entry is re-queued from its row (the dispatcher's
dead-worker detection, or the lease).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Handoff:
    """Run this attempt of a claimed realtime job. ``trace``: W3C trace-context headers
    (``{"traceparent": ..., "tracestate": ...}``) of the job's trace, carried untouched."""

    job_id: str
    attempt: int
    trace: dict[str, str] | None = None


def encode(message: Handoff) -> dict[str, str]:
    """The stream entry's fields (``XADD key * <fields>``)."""
    fields = {"job": message.job_id, "attempt": str(message.attempt)}
    if message.trace:
        fields["trace"] = json.dumps(message.trace, separators=(",", ":"))
    return fields


def decode(fields: Mapping[bytes | str, bytes | str]) -> Handoff | None:
    """The message back from an entry's fields, or None when they are not one of ours."""
    try:
        plain = {_text(k): _text(v) for k, v in fields.items()}
        trace = json.loads(plain["trace"]) if "trace" in plain else None
        if trace is not None and not (isinstance(trace, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in trace.items())):
            return None
        attempt = int(plain["attempt"])
        job_id = plain["job"]
    except (KeyError, ValueError):
        return None
    if not job_id or attempt < 1:
        return None
    return Handoff(job_id, attempt, trace)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
