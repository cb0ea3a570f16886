"""An attempt's final write and the dispatcher's wake-up as one statement (a CTE: the NOTIFY
runs only if the row was this attempt's to end), built once per shape of its values.

A worker ends every job this way, and building the UPDATE, its CTE and their cache key per
job cost more than the statement's round trip (service.store.lifecycle, "built once"). The
values' keys make the shape (a job with or without its first-token stamp); a resumed job's
values hold SQL (counters added to, events appended), and that rare write is built per call.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Select, Update, select
from sqlalchemy.sql import ClauseElement

from service.store import lifecycle, wakeups


def end_statement(job_id: uuid.UUID, *, attempt: int, worker_id: str, succeeded: bool,
                  values: Mapping[str, Any], now: dt.datetime, wakeup: wakeups.Wakeup
                  ) -> tuple[Select[Any], dict[str, Any]]:
    """The statement and its parameters: the row ended as ``lifecycle.end`` says, RETURNING
    its columns and ``notified``; no row if the attempt no longer owns the job."""
    if any(isinstance(v, ClauseElement) for v in values.values()):
        return _with_wakeup(lifecycle.end(job_id, attempt=attempt, worker_id=worker_id,
                                          succeeded=succeeded, values=values, now=now),
                            wakeups.notify_expr(wakeup)), {}
    params = wakeups.notify_params(wakeup)
    params |= lifecycle.owner_params(job_id, attempt=attempt, worker_id=worker_id, now=now)
    params |= {f"p_{key}": value for key, value in values.items()}
    return _built(succeeded, tuple(sorted(values))), params


@functools.lru_cache(maxsize=32)
def _built(succeeded: bool, keys: tuple[str, ...]) -> Select[Any]:
    return _with_wakeup(lifecycle.end(
        lifecycle.P_JOB_ID, attempt=lifecycle.P_ATTEMPT, worker_id=lifecycle.P_WORKER_ID,
        succeeded=succeeded, values={key: lifecycle.column_param(key) for key in keys},
        now=lifecycle.P_NOW), wakeups.NOTIFY)


def _with_wakeup(end: Update, notify: ColumnElement[Any]) -> Select[Any]:
    ended = end.cte("ended")
    return select(ended, notify.label("notified")).select_from(ended)
