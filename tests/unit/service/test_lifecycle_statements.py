"""The lifecycle's guarded statements compile once and run as compiled: an expanding IN list
(SQLAlchemy's post-compile step) would be re-rendered at every execution, on the realtime
path's claim and end writes."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy.dialects import postgresql

from service.store.lifecycle import TRANSITIONS, JobEvent, guarded
from service.store.models.jobs import Job


@pytest.mark.parametrize("event", [e for e in JobEvent if TRANSITIONS[e].sources])
def test_a_guarded_statement_has_nothing_left_to_render_at_execution(event: JobEvent) -> None:
    statement = guarded(event, Job.worker_id == "w", now=dt.datetime.now(dt.UTC))
    compiled = statement.compile(dialect=postgresql.dialect())
    assert "POSTCOMPILE" not in compiled.string
    assert not compiled.literal_execute_params and not compiled.post_compile_params
    statuses = sorted(v for k, v in compiled.params.items() if k.startswith("param_"))
    assert statuses == sorted(TRANSITIONS[event].sources)


def test_the_read_of_placed_jobs_has_nothing_left_to_render_at_execution() -> None:
    from service.store.job_queries import _PLACED_BY_ID

    compiled = _PLACED_BY_ID.compile(dialect=postgresql.dialect())
    assert "POSTCOMPILE" not in compiled.string and not compiled.post_compile_params
