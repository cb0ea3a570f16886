"""A hand-off sent alongside its row's insert (the API's express path; worker.claim_ahead): the
worker starts the engine before the row exists, its claim waits for the row, and only the
first token leaves the worker before the row is committed (the API that sent the entry reads
the stream only after its commit: claimed_job.may_send_unconfirmed); a row that never appears
is given up, its engine request aborted and that stream left to expire. Without the ``ahead``
mark the same entry is stale at once, and nothing at all leaves before a claim."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from redis import Redis as SyncRedis

from service.cli.bootstrap import create_tenant_with_key
from service.store.handoff import JobBody
from service.store.keys import stream_key
from service.store.settings import Settings
from tests.integration.test_early_start import RecordingEngine, run_early, stream_entries
from tests.integration.test_job_writes import WORKER, queued_claimed_job, row
from worker.engine.base import EngineRequest, TokenDelta
from worker.engine.config import SimEngineConfig
from worker.host import EngineHost


def stream_ttl(redis_url: str, job_id: uuid.UUID) -> int:
    return int(SyncRedis.from_url(redis_url).ttl(stream_key(job_id)))


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of its own: a job left assigned here must not reach a stack's queue."""
    return private_database_url


@pytest.fixture
def tenant_id(database_url: str) -> uuid.UUID:
    return create_tenant_with_key(Settings(database_url=database_url), "ahead")[0]

REQUEST = {"model": "sim-model", "temperature": 0, "ignore_eos": True,
           "messages": [{"role": "user", "content": "count the writes"}]}


def body(tenant: uuid.UUID, max_tokens: int) -> JobBody:
    return JobBody("chat.completions", REQUEST, max_tokens, 0, str(tenant))


def test_the_claim_waits_for_a_row_committed_after_the_entry(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    job_id = uuid.uuid4()

    async def meanwhile(engine: RecordingEngine) -> None:
        for _ in range(200):
            if engine.submitted:
                break
            await asyncio.sleep(0.01)
        assert engine.submitted == [f"{job_id}:1"]  # started with no row at all
        await asyncio.sleep(0.3)
        assert stream_entries(test_redis_url, job_id) == 1  # the first token, not the rest
        await asyncio.to_thread(queued_claimed_job, database_url, tenant_id, 4, job_id)

    outcome, _ = asyncio.run(run_early(database_url, test_redis_url, job_id, 1,
                                       body(tenant_id, 4), speed=float("inf"),
                                       meanwhile=meanwhile, ahead=True))
    assert outcome == "succeeded"
    job = row(database_url, job_id)
    assert (job.status, job.attempt, job.completion_tokens) == ("succeeded", 1, 4)
    assert job.created_at <= job.started_at <= job.first_token_at <= job.finished_at
    assert stream_entries(test_redis_url, job_id) == 5  # 4 deltas and the final entry


def test_a_row_that_never_appears_is_given_up(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("worker.claim_ahead.AHEAD_WAIT_S", 0.3)
    job_id = uuid.uuid4()
    outcome, engine = asyncio.run(run_early(database_url, test_redis_url, job_id, 1,
                                            body(tenant_id, 400), speed=1.0, ahead=True))
    assert outcome == "skipped" and engine.submitted == [f"{job_id}:1"]
    assert stream_entries(test_redis_url, job_id) == 1  # its first token, nobody's to read
    assert 0 < stream_ttl(test_redis_url, job_id) <= 60  # the outbox's TTL: it goes


def test_without_the_mark_a_missing_row_is_stale_at_once(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    job_id = uuid.uuid4()

    async def meanwhile(engine: RecordingEngine) -> None:
        await asyncio.sleep(0.3)  # long after the claim gave up
        await asyncio.to_thread(queued_claimed_job, database_url, tenant_id, 4, job_id)

    outcome, _ = asyncio.run(run_early(database_url, test_redis_url, job_id, 1,
                                       body(tenant_id, 4), speed=1.0, meanwhile=meanwhile))
    assert outcome == "skipped"
    assert row(database_url, job_id).status == "assigned"  # not this entry's to start
    assert stream_entries(test_redis_url, job_id) == 0


class GatedEngine(RecordingEngine):
    """Holds every request's first output until ``gate`` is set (a long prefill)."""

    def __init__(self, config: SimEngineConfig) -> None:
        super().__init__(config)
        self.gate = asyncio.Event()

    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenDelta, None]:
        async with contextlib.aclosing(super().generate(request)) as deltas:
            async for delta in deltas:
                await self.gate.wait()
                yield delta


def run_gated(database_url: str, redis_url: str, tenant_id: uuid.UUID, job_id: uuid.UUID,
              meanwhile: Any) -> tuple[str, RecordingEngine]:
    """The job's ahead entry on a gated engine (``GatedEngine``), 4 tokens at no cost."""
    return asyncio.run(run_early(database_url, redis_url, job_id, 1, body(tenant_id, 4),
                                 speed=float("inf"), meanwhile=meanwhile, ahead=True,
                                 engine_type=GatedEngine))


async def _submitted(engine: RecordingEngine) -> None:
    for _ in range(200):
        if engine.submitted:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine never got the request")


def test_the_claim_starts_with_the_first_token_not_beside_the_prefill(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("worker.runner.AHEAD_CLAIM_AFTER_S", 30.0)
    job_id = queued_claimed_job(database_url, tenant_id, 4)  # committed before the entry

    async def meanwhile(engine: GatedEngine) -> None:
        await _submitted(engine)
        await asyncio.sleep(0.3)
        assert row(database_url, job_id).status == "assigned"  # no claim during the prefill
        engine.gate.set()

    outcome, _ = run_gated(database_url, test_redis_url, tenant_id, job_id, meanwhile)
    assert outcome == "succeeded"
    job = row(database_url, job_id)
    assert job.status == "succeeded"
    # Claimed after its first token left, and still a timeline in order.
    assert job.created_at <= job.started_at <= job.first_token_at
    assert job.first_token_at <= job.finished_at
    assert stream_entries(test_redis_url, job_id) == 5


def test_a_long_prefill_is_claimed_after_a_short_while_keeping_its_lease(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A job merely assigned is not renewed: one queued in the engine for longer than its lease
    # would be re-run elsewhere if its claim waited for the first token.
    monkeypatch.setattr("worker.runner.AHEAD_CLAIM_AFTER_S", 0.1)
    job_id = queued_claimed_job(database_url, tenant_id, 4)

    async def meanwhile(engine: GatedEngine) -> None:
        await _submitted(engine)
        await asyncio.sleep(0.6)
        job = row(database_url, job_id)
        assert job.status == "running" and job.started_at is not None  # claimed, no token yet
        assert stream_entries(test_redis_url, job_id) == 0
        engine.gate.set()

    outcome, _ = run_gated(database_url, test_redis_url, tenant_id, job_id, meanwhile)
    assert outcome == "succeeded" and row(database_url, job_id).status == "succeeded"


async def _heartbeat_renewal(engine: RecordingEngine, database_url: str) -> None:
    """What a heartbeat of the engine's host does to the leases of the runner's jobs."""
    host = EngineHost(engine, Settings(database_url=database_url), WORKER)
    host.runner = engine.runner
    await host._renew_leases()


def test_a_heartbeat_during_the_prefill_leaves_an_unclaimed_job_running(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its row is not running for this worker yet: the lease renewal must not take it for a
    # job cancelled or re-queued meanwhile (found by bench/idle_ttft_pairs.py: such jobs
    # were aborted and re-run when their leases ran out, 30 s later).
    monkeypatch.setattr("worker.runner.AHEAD_CLAIM_AFTER_S", 30.0)
    job_id = queued_claimed_job(database_url, tenant_id, 4)

    async def meanwhile(engine: GatedEngine) -> None:
        await _submitted(engine)
        assert engine.runner is not None
        assert engine.runner.unclaimed(str(job_id))
        await _heartbeat_renewal(engine, database_url)
        assert engine.aborted == []
        engine.gate.set()

    outcome, engine = run_gated(database_url, test_redis_url, tenant_id, job_id, meanwhile)
    assert outcome == "succeeded" and engine.aborted == []
    assert row(database_url, job_id).status == "succeeded"


def test_a_claimed_job_still_queued_for_its_first_token_is_renewed(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its claim answered, the attempt still waits in the engine's queue (a burst on a slow
    # box: 40 s to a first token). The renewal must keep it: its lease ran out 30 s after the
    # claim, and a burst's jobs were re-run while their first attempts went on streaming.
    monkeypatch.setattr("worker.runner.AHEAD_CLAIM_AFTER_S", 0.1)
    job_id = queued_claimed_job(database_url, tenant_id, 4)

    async def meanwhile(engine: GatedEngine) -> None:
        await _submitted(engine)
        assert engine.runner is not None
        for _ in range(300):
            if row(database_url, job_id).status == "running":
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the claim's answer reaches the runner
        claimed_until = row(database_url, job_id).lease_expires_at
        assert not engine.runner.unclaimed(str(job_id))
        await _heartbeat_renewal(engine, database_url)
        assert row(database_url, job_id).lease_expires_at > claimed_until
        assert engine.aborted == [] and stream_entries(test_redis_url, job_id) == 0
        engine.gate.set()

    outcome, engine = run_gated(database_url, test_redis_url, tenant_id, job_id, meanwhile)
    assert outcome == "succeeded" and engine.aborted == []
    assert row(database_url, job_id).status == "succeeded"
