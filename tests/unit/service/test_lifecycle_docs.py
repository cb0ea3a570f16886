"""The status diagrams in docs/ are the lifecycle tables in code, and the tables are sound."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Update
from sqlalchemy.dialects import postgresql

from service.store import batch_lifecycle, lifecycle
from service.store.models.batches import BatchStatus
from service.store.models.jobs import JobStatus

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _mermaid_moves(doc: str) -> set[tuple[str, str, str]]:
    """(event, from, to) for every ``A --> B: e1, e2`` line of the doc's state diagram."""
    text = (DOCS / doc).read_text()
    diagram = re.search(r"```mermaid\nstateDiagram-v2\n(.*?)```", text, re.S)
    assert diagram, f"{doc} has no state diagram"
    moves = set()
    for line in diagram.group(1).splitlines():
        m = re.match(r"\s*(\S+) --> (\S+?)(?::\s*(.+))?$", line)
        if m and m.group(3):
            for event in m.group(3).split(","):
                moves.add((event.strip(), m.group(1), m.group(2)))
    return moves


def _table_moves(table: object) -> set[tuple[str, str, str]]:
    moves = set()
    for event, rule in table.items():  # type: ignore[attr-defined]
        for source in rule.sources or ["[*]"]:
            moves.add((str(event), str(source), str(rule.target)))
    return moves


def test_jobs_md_draws_the_job_table() -> None:
    assert _mermaid_moves("jobs.md") == _table_moves(lifecycle.TRANSITIONS)


def test_batches_md_draws_the_batch_table() -> None:
    assert _mermaid_moves("batches.md") == _table_moves(batch_lifecycle.BATCH_TRANSITIONS)


@pytest.mark.parametrize("final", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_final_job_statuses_have_no_way_out(final: JobStatus) -> None:
    assert not any(source == final for source, _ in lifecycle.ALLOWED_MOVES)


def test_final_batch_statuses_have_no_way_out() -> None:
    final = {BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.EXPIRED,
             BatchStatus.CANCELLED}
    assert not any(source in final for source, _ in batch_lifecycle.ALLOWED_BATCH_MOVES)


def _sql(stmt: Update) -> str:
    return str(stmt.compile(dialect=postgresql.dialect()))


def test_every_write_is_guarded_by_status() -> None:
    now, jid = dt.datetime.now(dt.UTC), uuid.uuid4()
    statements = [
        lifecycle.claim(jid, worker_id="w", lease_s=1, now=now),
        lifecycle.START.statement,
        lifecycle.park(jid, attempt=1, worker_id="w", generated_ids=[], recomputed=0, events=[],
                       now=now),
        lifecycle.end(jid, attempt=1, worker_id="w", succeeded=True, values={}, now=now),
        lifecycle.requeue_expired(now),
        lifecycle.reject(jid, error={}, now=now),
        lifecycle.CLAIM_MANY.statement,
    ]
    for stmt in statements:
        where = _sql(stmt).split("WHERE", 1)[1]
        assert "jobs.status IN" in where
    for stmt in statements[1:4]:  # a worker's own events name its attempt and itself
        where = _sql(stmt).split("WHERE", 1)[1]
        assert "jobs.attempt =" in where and "jobs.worker_id =" in where


def _statuses(sql: str, bound: dict[str, Any]) -> tuple[object, set[object]]:
    """(the status the statement SETs, the statuses its WHERE allows), as bound."""
    set_part, where = sql.split("WHERE", 1)
    target = re.search(r"status=%\((\w+)\)s", set_part)
    sources = re.search(r"jobs\.status IN \(((?:%\(\w+\)s::\w+(?:, )?)+)\)", where)
    assert target and sources
    return bound[target.group(1)], {bound[n] for n in re.findall(r"%\((\w+)\)s",
                                                                 sources.group(1))}


def test_the_statements_built_once_move_as_the_table_says_with_their_values() -> None:
    """START and CLAIM_MANY (bound parameters, built at import): each moves the job as its
    event's row of TRANSITIONS says, and its ``params`` give every bound parameter a value."""
    now, jid, other = dt.datetime.now(dt.UTC), uuid.uuid4(), uuid.uuid4()
    lease_until = now + dt.timedelta(seconds=5)
    cases = [
        (lifecycle.START, lifecycle.JobEvent.START,
         lifecycle.START.params(jid, attempt=2, worker_id="w", lease_s=5, now=now),
         {"p_job_id": jid, "p_attempt": 2, "p_worker_id": "w", "p_now": now,
          "p_lease_until": lease_until}),
        (lifecycle.CLAIM_MANY, lifecycle.JobEvent.CLAIM,
         lifecycle.CLAIM_MANY.params([(jid, "w"), (other, "v")], lease_s=5, now=now),
         {"p_job_ids": [jid, other], "p_worker_ids": ["w", "v"], "p_now": now,
          "p_lease_until": lease_until}),
    ]
    for prepared, event, params, expected in cases:
        compiled = prepared.statement.compile(dialect=postgresql.dialect())
        sql = str(compiled)
        assert params == expected
        assert set(re.findall(r"%\((p_\w+)\)s", sql)) == set(params)  # none unbound, no extra
        rule = lifecycle.TRANSITIONS[event]
        assert _statuses(sql, compiled.construct_params(params)) == (rule.target, rule.sources)
    with pytest.raises(ValueError):
        lifecycle.CLAIM_MANY.params([], lease_s=5, now=now)


def test_a_narrower_source_set_is_allowed_and_a_wider_one_refused() -> None:
    now = dt.datetime.now(dt.UTC)
    lifecycle.guarded(lifecycle.JobEvent.CANCEL, now=now, sources={JobStatus.QUEUED})
    with pytest.raises(ValueError):
        lifecycle.guarded(lifecycle.JobEvent.CLAIM, now=now, sources={JobStatus.RUNNING})


def test_advance_refuses_a_move_outside_the_batch_table() -> None:
    batch = batch_lifecycle.new_batch(now=dt.datetime.now(dt.UTC))
    with pytest.raises(batch_lifecycle.IllegalBatchMove):
        batch_lifecycle.advance(batch, batch_lifecycle.BatchEvent.COMPLETE, dt.datetime.now(dt.UTC))
    batch_lifecycle.advance(batch, batch_lifecycle.BatchEvent.VALIDATED, dt.datetime.now(dt.UTC))
    assert batch.status == BatchStatus.IN_PROGRESS and batch.in_progress_at is not None
