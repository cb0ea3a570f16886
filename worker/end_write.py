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

from sqlalchemy import DateTime, Integer, Select, String, Uuid, bindparam, func, select
from sqlalchemy.sql import ClauseElement

from service.store import lifecycle, wakeups
from service.store.models.jobs import Job


def end_statement(job_id: uuid.UUID, *, attempt: int, worker_id: str, succeeded: bool,
                  values: Mapping[str, Any], now: dt.datetime, wakeup: wakeups.Wakeup
                  ) -> tuple[Select[Any], dict[str, Any]]:
    """The statement and its parameters: the row ended as ``lifecycle.end`` says, RETURNING
    its columns and ``notified``; no row if the attempt no longer owns the job."""
    if any(isinstance(v, ClauseElement) for v in values.values()):
        ended = lifecycle.end(job_id, attempt=attempt, worker_id=worker_id,
                              succeeded=succeeded, values=values, now=now).cte("ended")
        return select(ended, wakeups.notify_expr(wakeup).label("notified")).select_from(
            ended), {}
    params = {f"p_{key}": value for key, value in values.items()}
    params |= {"p_job_id": job_id, "p_attempt": attempt, "p_worker_id": worker_id,
               "p_now": now, "p_wakeup": wakeups.encode(wakeup)}
    return _built(succeeded, tuple(sorted(values))), params


@functools.lru_cache(maxsize=32)
def _built(succeeded: bool, keys: tuple[str, ...]) -> Select[Any]:
    columns = Job.__table__.c
    ended = lifecycle.end(
        bindparam("p_job_id", type_=Uuid()), attempt=bindparam("p_attempt", type_=Integer()),
        worker_id=bindparam("p_worker_id", type_=String()), succeeded=succeeded,
        values={key: bindparam(f"p_{key}", type_=columns[key].type) for key in keys},
        now=bindparam("p_now", type_=DateTime(timezone=True))).cte("ended")
    return select(ended, func.pg_notify(wakeups.CHANNEL, bindparam(
        "p_wakeup", type_=String())).label("notified")).select_from(ended)
