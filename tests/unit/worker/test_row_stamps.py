"""RowStamps without a database: the events it makes for a preemption and a resume, the
statements its stamps send (which row, which attempt, what value), when the first-token stamp
is written, and that a stamp in a Postgres outage is skipped while any other error is not."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from typing import Any, Literal

import psycopg
import pytest
from sqlalchemy import Update
from sqlalchemy.dialects import postgresql

from service.store.outages import POSTGRES, Dependencies
from service.store.settings import EngineSettings, JobSettings, Settings
from worker.claimed_job import ClaimedJob
from worker.engine.base import EngineRequest, SamplingSpec
from worker.engine.sim import SimEngine
from worker.stamps import RowStamps

WORKER = "stamp-w"


class Sessions:
    """A sessionmaker that records what its sessions execute and commit, or fails."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.executed: list[Update] = []
        self.commits = 0
        self.fail = fail

    def __call__(self) -> Sessions:
        return self

    async def __aenter__(self) -> Sessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, stmt: Update) -> None:
        if self.fail is not None:
            raise self.fail
        self.executed.append(stmt)

    async def commit(self) -> None:
        self.commits += 1


class OffloadingEngine(SimEngine):
    supports_kv_offload = True


def stamps(sessions: Sessions | None = None, *,
           mode: Literal["recompute", "swap"] = "recompute", stamp_s: float = 0.0,
           engine: SimEngine | None = None) -> tuple[RowStamps, Dependencies]:
    settings = Settings(engine=EngineSettings(kind="sim", served_model_name="sim-model",
                                              preemption_mode=mode),
                        jobs=JobSettings(first_token_stamp_seconds=stamp_s))
    deps = Dependencies(logging.getLogger("test"))
    return RowStamps(settings=settings, engine=engine or SimEngine(), worker_id=WORKER,
                     sessionmaker=sessions or Sessions(),  # type: ignore[arg-type]
                     deps=deps), deps


def job(*, checkpoint: list[int] | None = None, resume_of: str | None = None) -> ClaimedJob:
    return ClaimedJob(uuid.uuid4(), 3, "completions", {"prompt": "p"}, 16, 0,
                      checkpoint or [], resume_of=resume_of)


def request(prompt_tokens: int) -> EngineRequest:
    return EngineRequest("r", list(range(prompt_tokens)), SamplingSpec(max_tokens=4))


def params(stmt: Update) -> dict[str, Any]:
    return dict(stmt.compile(dialect=postgresql.dialect()).params)


def where(stmt: Update) -> str:
    return str(stmt.compile(dialect=postgresql.dialect())).split("WHERE", 1)[1]


def test_a_preempted_event_names_the_attempt_the_tokens_and_the_kv_dropped() -> None:
    rs, _ = stamps()
    event = rs.preempted_event(job(), 40, 12)
    assert event["type"] == "preempted" and event["worker"] == WORKER and event["attempt"] == 3
    assert (event["checkpoint_tokens"], event["new_tokens"]) == (40, 12)
    assert event["kv"] == "dropped" and event["mode"] == "recompute"
    assert "fallback_reason" not in event


def test_swap_on_an_engine_that_cannot_offload_says_why_it_fell_back() -> None:
    rs, _ = stamps(mode="swap")
    event = rs.preempted_event(job(), 1, 1)
    assert event["kv"] == "dropped" and event["mode"] == "recompute"
    assert event["requested_mode"] == "swap" and "SimEngine" in event["fallback_reason"]


def test_swap_on_an_engine_that_offloads_keeps_the_kv() -> None:
    rs, _ = stamps(mode="swap", engine=OffloadingEngine())
    event = rs.preempted_event(job(), 1, 1)
    assert event["mode"] == "swap" and event["kv"].startswith("kept in this worker's CPU")


@pytest.mark.parametrize(("prefill", "cached", "recomputed"), [(30, 10, 20), (30, 50, 0)])
def test_a_resumed_event_counts_what_the_prefill_recomputed(prefill: int, cached: int,
                                                           recomputed: int) -> None:
    rs, _ = stamps()
    event = rs.resumed_event(job(checkpoint=[1, 2, 3], resume_of="preemption"),
                             request(prefill), cached)
    assert event["type"] == "resumed" and event["after"] == "preemption"
    assert event["worker"] == WORKER and event["attempt"] == 3
    assert event["checkpoint_tokens"] == 3 and event["prefill_tokens"] == prefill
    assert event["cached_tokens"] == min(cached, prefill)
    assert event["recomputed_tokens"] == recomputed


def test_mark_resumed_appends_the_event_to_this_attempts_row_once() -> None:
    sessions = Sessions()
    rs, _ = stamps(sessions)
    held = job(checkpoint=[1, 2], resume_of="retry")
    asyncio.run(rs.mark_resumed(held, request(10), 4))
    assert held.resume_logged
    [stmt] = sessions.executed
    values = params(stmt)
    assert values["id_1"] == held.job_id and values["attempt_1"] == 3
    assert values["worker_id_1"] == WORKER
    appended = next(v for v in values.values() if isinstance(v, str) and '"resumed"' in v)
    assert '"recomputed_tokens": 6' in appended and '"after": "retry"' in appended
    assert sessions.commits == 1


def test_the_first_token_is_stamped_at_once_without_a_delay() -> None:
    sessions = Sessions()
    rs, _ = stamps(sessions, stamp_s=0.0)
    held = job()
    held.first_token_at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    asyncio.run(rs.mark_first_token(held))
    assert held.stamp is None and held.stamp_writing
    [stmt] = sessions.executed
    values = params(stmt)
    assert values["first_token_at"] == held.first_token_at
    assert values["id_1"] == held.job_id and values["attempt_1"] == 3
    assert "jobs.status IN" in where(stmt)


def test_with_a_delay_the_stamp_waits_and_a_cancelled_one_writes_nothing() -> None:
    async def main() -> tuple[list[Update], list[Update]]:
        sessions = Sessions()
        rs, _ = stamps(sessions, stamp_s=0.05)
        later, dropped = job(), job()
        for held in (later, dropped):
            held.first_token_at = dt.datetime.now(dt.UTC)
            await rs.mark_first_token(held)
            assert held.stamp is not None and not held.stamp_writing
        assert sessions.executed == []  # nothing yet: an end write may carry it instead
        assert dropped.stamp is not None
        dropped.stamp.cancel()  # the attempt ended first
        assert later.stamp is not None
        await later.stamp
        return sessions.executed, [s for s in sessions.executed
                                   if params(s)["id_1"] == dropped.job_id]

    executed, of_dropped = asyncio.run(main())
    assert len(executed) == 1 and of_dropped == []


def test_a_stamp_in_a_postgres_outage_is_skipped_and_the_outage_noted() -> None:
    rs, deps = stamps(Sessions(fail=psycopg.OperationalError("connection refused")))
    held = job()
    held.first_token_at = dt.datetime.now(dt.UTC)
    asyncio.run(rs.mark_first_token(held))  # does not raise
    assert deps.states[POSTGRES].down_since is not None


def test_a_stamp_that_fails_otherwise_raises() -> None:
    rs, deps = stamps(Sessions(fail=ValueError("a bug")))
    held = job()
    held.first_token_at = dt.datetime.now(dt.UTC)
    with pytest.raises(ValueError):
        asyncio.run(rs.mark_first_token(held))
    assert deps.states[POSTGRES].down_since is None
