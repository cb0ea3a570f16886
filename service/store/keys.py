"""The per-job Redis Stream: the worker writes token deltas, the API relays them as SSE.

Every entry has a `type` and the `attempt` that wrote it:
  delta  text (new text), tokens (count of new tokens)
  final  finish_reason, prompt_tokens, completion_tokens   (after the row is final in Postgres)
  error  code, message, status                             (after the row is final in Postgres)
A retried attempt starts again from its first token; readers drop what they already relayed.
"""

from __future__ import annotations

import uuid
from typing import Any


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


def worker_queue(worker_id: str) -> str:
    """Each worker consumes its own Celery queue, so the dispatcher decides placement."""
    return f"fairway.worker.{worker_id}"


def decode_fields(fields: dict[bytes | str, bytes | str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in fields.items():
        key = k.decode() if isinstance(k, bytes) else k
        out[key] = v.decode() if isinstance(v, bytes) else v
    return out
