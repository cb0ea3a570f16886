"""The end write built once per shape (worker.end_write) says what the one built per call
says: the same SQL, the same values, and a resumed job's SQL values still built per call."""

from __future__ import annotations

import datetime as dt
import re
import uuid

from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from service.store import lifecycle, wakeups
from service.store.models.jobs import Job
from worker.end_write import end_statement

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
JOB = uuid.uuid4()


def _per_call(values: dict[str, object], succeeded: bool) -> str:
    ended = lifecycle.end(JOB, attempt=2, worker_id="w", succeeded=succeeded, values=values,
                          now=NOW).cte("ended")
    wakeup = wakeups.notify_expr(wakeups.JobEnded(JOB, "w", 5, 3)).label("notified")
    return str(select(ended, wakeup).select_from(ended).compile(dialect=postgresql.dialect()))


def _shape(sql: str) -> str:
    return re.sub(r"%\(\w+\)s", "?", sql)


def test_a_plain_end_is_built_once_and_says_the_same() -> None:
    for succeeded, values in [
        (True, {"result": {"text": "hi"}, "finish_reason": "stop", "prompt_tokens": 5,
                "completion_tokens": 3, "cached_tokens": 0}),
        (True, {"result": {"text": "hi"}, "finish_reason": "stop", "prompt_tokens": 5,
                "completion_tokens": 3, "cached_tokens": 0, "first_token_at": NOW}),
        (False, {"error": {"code": "engine_error", "message": "m", "status": 500}}),
    ]:
        kwargs = dict(attempt=2, worker_id="w", succeeded=succeeded, values=values, now=NOW,
                      wakeup=wakeups.JobEnded(JOB, "w", 5, 3))
        statement, params = end_statement(JOB, **kwargs)  # type: ignore[arg-type]
        again, _ = end_statement(JOB, **kwargs)  # type: ignore[arg-type]
        assert again is statement  # built once for this shape
        compiled = statement.compile(dialect=postgresql.dialect())
        assert _shape(str(compiled)) == _shape(_per_call(values, succeeded))
        bound = compiled.construct_params(params)
        assert {"p_job_id": JOB, "p_attempt": 2, "p_worker_id": "w", "p_now": NOW}.items() <= (
            bound.items())
        assert all(bound[f"p_{key}"] == value for key, value in values.items())
        assert bound["p_wakeup"] == wakeups.encode(wakeups.JobEnded(JOB, "w", 5, 3))


def test_values_holding_sql_are_built_per_call() -> None:
    values = {"completion_tokens": 3, "recomputed_tokens": Job.recomputed_tokens + 4}
    statement, params = end_statement(JOB, attempt=2, worker_id="w", succeeded=True,
                                      values=values, now=NOW,
                                      wakeup=wakeups.JobEnded(JOB, "w", 5, 3))
    assert params == {}
    assert "recomputed_tokens=(jobs.recomputed_tokens +" in str(statement.compile(
        dialect=postgresql.dialect()))
