"""Runs one claimed job on the engine: the logic behind the Celery task, testable without Celery.

Everything here runs on the engine host's event loop, so database and Redis calls are async.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
import uuid
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scheduler.tiers import FLEX_TIER
from service.store import handoff, job_stream, lifecycle, nul_codec, tracing, wakeups
from service.store.db import without_transaction
from service.store.models.jobs import Job, JobStatus
from service.store.outages import Dependencies, through_outages
from service.store.response_events import record_response_end_async
from service.store.response_status import RESPONSES_ENDPOINT
from service.store.settings import Settings
from worker.accounting import account_job_end
from worker.adapters import WorkerAdapters
from worker.checkpoint import park_job
from worker.claim_ahead import AHEAD_CLAIM_AFTER_S
from worker.claimed_job import (
    ClaimedJob,
    ClaimLost,
    Progress,
    StaleBody,
    claim_pending,
    confirm,
    may_send_unconfirmed,
    start_claim,
    unconfirmed,
)
from worker.claims import Claims
from worker.end_write import end_statement
from worker.engine.base import Engine, EngineError, EngineRequest
from worker.engine_request import build_engine_request, tenant_cache_salt
from worker.stamps import RowStamps
from worker.stream_outbox import StreamOutbox
from worker.stream_pacer import StreamPacer

log = logging.getLogger("fairway.worker")


# A running job's tokens are checkpointed (with the worker's heartbeat) once this many are new.
CHECKPOINT_EVERY_TOKENS = 16
# How long a finished attempt keeps trying to write its result through a Postgres outage.
FINAL_WRITE_PATIENCE_S = 3600.0


def engine_request_id(job_id: uuid.UUID | str, attempt: int) -> str:
    return f"{job_id}:{attempt}"


class JobRunner:
    def __init__(self, *, engine: Engine, settings: Settings, worker_id: str,
                 sessionmaker: async_sessionmaker[AsyncSession], redis: Redis,
                 outbox: StreamOutbox, deps: Dependencies) -> None:
        self.engine = engine
        self.settings = settings
        self.worker_id = worker_id
        self.sessionmaker = sessionmaker
        self.redis = redis
        self.outbox = outbox  # stream entries, delivered through Redis outages
        self.deps = deps  # this worker's view of Postgres and Redis
        self.claims = Claims(settings=settings, worker_id=worker_id, sessionmaker=sessionmaker,
                             deps=deps)
        self.stamps = RowStamps(settings=settings, engine=engine, worker_id=worker_id,
                                sessionmaker=sessionmaker, deps=deps)
        self.active: dict[str, str] = {}  # job id -> engine request id, running here
        self.progress: dict[str, tuple[ClaimedJob, Progress]] = {}  # what each has made
        self.preempting: set[str] = set()  # job ids being taken back (park, don't drop)
        self.adapters = WorkerAdapters(settings, sessionmaker, engine)  # tenants' LoRA adapters

    async def run(self, job_id: str, attempt: int, trace: dict[str, str] | None = None,
                  body: handoff.JobBody | None = None, ahead: bool = False) -> str:
        """Returns the outcome: skipped | succeeded | failed | aborted. ``trace``: the job's W3C
        trace context, as the hand-off carried it (a Celery delivery's comes in its headers,
        made current by Celery's instrumentation). ``body``: the hand-off's engine input, to
        start the engine while the claim commits (service.store.handoff). ``ahead``: the
        entry was sent alongside its row's insert; the claim waits for the row
        (worker.claim_ahead)."""
        with tracing.continued(trace):  # this task's spans continue the dispatcher's send
            return await self._run(job_id, attempt, trace, body, ahead)

    async def _run(self, job_id: str, attempt: int, trace: dict[str, str] | None,
                   body: handoff.JobBody | None, ahead: bool) -> str:
        if body is None:
            with tracing.span("fairway.worker.receive"):  # the claim: this attempt is ours
                claimed = await self.claims.claim(uuid.UUID(job_id), attempt, ahead)
        else:
            claimed = self._start_early(uuid.UUID(job_id), attempt, body, ahead)
        if claimed is None:
            log.info("stale or duplicate delivery ignored",
                     extra={"job_id": job_id, "attempt": attempt})
            return "skipped"
        claimed.trace = trace
        rid = engine_request_id(claimed.job_id, attempt)
        self.active[job_id] = rid
        try:
            while True:
                try:
                    return await self._execute(claimed, rid)
                except StaleBody as stale:  # the row holds a checkpoint: run as it says
                    await self.engine.abort(rid)
                    log.warning("hand-off body was stale; running from the row",
                                extra={"job_id": job_id})
                    claimed = stale.claimed
        except ClaimLost:
            await self._drop_unclaimed(claimed, rid)
            log.info("stale or duplicate delivery ignored",
                     extra={"job_id": job_id, "attempt": attempt})
            return "skipped"
        except EngineError as exc:
            return await self._fail_confirmed(claimed, rid, 400, exc.code, str(exc), exc.param)
        except Exception:
            log.exception("job crashed on the engine", extra={"job_id": job_id})
            return await self._fail_confirmed(claimed, rid, 500, "engine_error",
                                              "The engine failed on this request.")
        finally:
            if claimed.stamp is not None and not claimed.stamp_writing:
                claimed.stamp.cancel()  # the attempt's last write carried the time
            self.active.pop(job_id, None)
            self.progress.pop(job_id, None)
            self.preempting.discard(job_id)

    def _start_early(self, job_id: uuid.UUID, attempt: int, body: handoff.JobBody,
                     ahead: bool = False) -> ClaimedJob:
        """The attempt as its hand-off describes it, its claim running alongside: the engine
        starts now, and ``confirm`` holds back everything it makes until the claim is in."""
        async def claim() -> ClaimedJob | None:
            with tracing.span("fairway.worker.receive"):
                return await self.claims.claim(job_id, attempt, ahead,
                                               since=job.first_token_at)

        job = ClaimedJob(job_id, attempt, body.endpoint, body.request, body.max_tokens,
                         body.priority, [],
                         cache_salt=tenant_cache_salt(self.settings, uuid.UUID(body.tenant_id)),
                         tenant_id=uuid.UUID(body.tenant_id))
        if ahead:  # the claim starts at its first token (confirm), or after a short while
            job.ahead, job.claim_later = True, claim
            asyncio.get_running_loop().call_later(AHEAD_CLAIM_AFTER_S, start_claim, job)
        else:
            job.claiming = asyncio.create_task(claim())
        return job

    async def _fail_confirmed(self, job: ClaimedJob, rid: str, status: int, code: str,
                              message: str, param: str | None = None) -> str:
        """A failure is the attempt's to write only once its claim is in."""
        try:
            await confirm(job)
        except ClaimLost:  # not ours to end
            await self._drop_unclaimed(job, rid)
            return "skipped"
        except StaleBody as stale:  # ours, as the row says: the same request fails the same
            job = stale.claimed
        await self._fail(job, status, code, message, param=param)
        return "failed"

    def unclaimed(self, job_id: str) -> bool:
        """Started early here, its claim not answered yet (claimed_job.claim_pending): its
        row is not running for this worker yet, nor lost to it. Once answered, even before
        ``confirm``, the row says which: a claimed attempt queued in the engine longer than
        its lease must be renewed (a burst's jobs were re-run, their first attempts still
        streaming), one whose claim failed is aborted at the renewal."""
        held = self.progress.get(job_id)
        return held is not None and claim_pending(held[0])

    async def _drop_unclaimed(self, job: ClaimedJob, rid: str) -> None:
        """An early-started attempt whose claim failed: its engine request stops, and a stream
        its first token went to (an express job's) expires, as an ended one does."""
        await self.engine.abort(rid)
        if job.early_output is not None:
            await self.outbox.expire_unended(job.job_id)

    def due_checkpoints(self, min_new: int = CHECKPOINT_EVERY_TOKENS
                        ) -> list[tuple[ClaimedJob, list[int]]]:
        """Running jobs with at least ``min_new`` tokens beyond their saved checkpoint, and
        every token they have now (the caller saves them, then ``checkpoint_saved``)."""
        due = []
        for job, progress in list(self.progress.values()):
            tokens = job.checkpoint + progress.new_ids
            if len(tokens) - job.saved_tokens >= min_new:
                due.append((job, tokens))
        return due

    async def preempt(self, job_id: str) -> bool:
        """Take a running job back: abort it in the engine within one step; the generate loop
        then parks it with a checkpoint instead of dropping it."""
        rid = self.active.get(job_id)
        if rid is None:
            return False
        self.preempting.add(job_id)
        await self.engine.abort(rid)
        return True

    def _build_request(self, job: ClaimedJob, rid: str) -> EngineRequest:
        return build_engine_request(self.engine, job, rid, self.settings.engine.max_model_len)

    async def _execute(self, job: ClaimedJob, rid: str) -> str:
        request = self._build_request(job, rid)
        request = await self.adapters.attach(request, job.tenant_id,
                                             str(job.request.get("model", "")))
        if request.sampling.max_tokens < 1:  # preempted right at its last token
            # Nothing runs: no prefill is paid again (everything counts as cached).
            await confirm(job)
            n = len(request.prompt_token_ids)
            return await self._succeed(job, Progress(prompt_tokens=n, cached=n,
                                                     finish_reason="length"), request)
        # Stream offsets are characters into the whole output, so readers can splice a
        # resumed or re-run attempt onto what they already relayed.
        offset = len(self.engine.decode(job.checkpoint)) if job.checkpoint else 0
        progress = Progress(prompt_tokens=len(request.prompt_token_ids))
        job.saved_tokens = len(job.checkpoint)
        self.progress[str(job.job_id)] = (job, progress)
        # Hops: from the engine enqueue to the first token on its way to Redis, then the rest.
        waiting, decoding = tracing.start_span("fairway.worker.first_token"), None
        pacer = StreamPacer(self.settings.worker.batch_stream_interval_ms / 1000
                            if job.priority >= FLEX_TIER else 0.0)
        # Closed at once if this attempt stops early (a lost claim aborts the request now,
        # not when the generator is collected: a re-run may reuse its request id).
        async with contextlib.aclosing(self.engine.generate(request)) as deltas:
            async for delta in deltas:
                out = bool(delta.token_ids or delta.text)
                # Started early: nothing leaves before the claim, but an express job's first
                # token (claimed_job.may_send_unconfirmed).
                if unconfirmed(job) and not (
                        out and may_send_unconfirmed(job)):
                    await confirm(job)
                if out:
                    if job.obs is not None:
                        job.obs.output()
                    elif unconfirmed(job):  # observed once the claim is in
                        job.early_output = time.perf_counter()
                    first = not progress.new_ids and not job.checkpoint
                    if first:  # the row's stamp, and no later than an express job's claim
                        job.first_token_at = dt.datetime.now(dt.UTC)
                    if job.resume_of is not None and not job.resume_logged:
                        await self.stamps.mark_resumed(job, request, delta.num_cached_tokens)
                    progress.new_ids.extend(delta.token_ids)
                    progress.pieces.append(delta.text)
                    traceparent = None
                    if waiting is not None:  # the first token, as it is handed to Redis
                        traceparent = tracing.traceparent(waiting)
                        tracing.end(waiting)
                        waiting, decoding = None, tracing.start_span("fairway.worker.decode")
                    if job.streamed and (entry := pacer.add(job_stream.Delta(
                            job.attempt, delta.text, len(delta.token_ids), offset, traceparent),
                            time.monotonic())) is not None:
                        await self.outbox.put(job.job_id, entry)
                    if unconfirmed(job):  # it left unconfirmed: the rest waits
                        await confirm(job)
                    if first:  # after the token is on its way: the stamp is not on the hot path
                        await self.stamps.mark_first_token(job)
                    offset += len(delta.text)
                if delta.finished:
                    progress.finish_reason = delta.finish_reason
                    progress.prompt_tokens = delta.num_prompt_tokens or progress.prompt_tokens
                    progress.cached = delta.num_cached_tokens
        if job.streamed and (held := pacer.flush()) is not None:  # before the end or park
            await self.outbox.put(job.job_id, held)
        tracing.end(waiting or decoding)
        await confirm(job)  # an attempt that made no output at all
        if progress.finish_reason in (None, "abort"):
            if str(job.job_id) in self.preempting:
                generated = job.checkpoint + progress.new_ids
                events = []
                if job.resume_of is not None and not job.resume_logged:
                    events.append(self.stamps.resumed_event(job, request, progress.cached))
                events.append(self.stamps.preempted_event(job, len(generated),
                                                          len(progress.new_ids)))
                parked = await through_outages(lambda: park_job(
                    self.sessionmaker, job_id=job.job_id, attempt=job.attempt,
                    worker_id=self.worker_id, generated_ids=generated,
                    recomputed=_recomputed(job, progress, request), events=events,
                    first_token_at=job.first_token_at),
                    self.deps, give_up_after_s=FINAL_WRITE_PATIENCE_S)
                if parked and job.obs is not None:
                    job.obs.preempted()
                return "preempted" if parked else "aborted"
            return "aborted"  # cancelled; whoever cancelled owns the row's status
        return await self._succeed(job, progress, request)

    async def _succeed(self, job: ClaimedJob, progress: Progress,
                       request: EngineRequest) -> str:
        now = dt.datetime.now(dt.UTC)
        generated = job.checkpoint + progress.new_ids
        # Decoding the whole output once keeps a resumed job's text identical to an
        # uninterrupted run's, whatever the token boundaries at the checkpoint.
        output = self.engine.decode(generated) if job.checkpoint else "".join(progress.pieces)
        prompt_tokens = progress.prompt_tokens - len(job.checkpoint)
        values: dict[str, Any] = {
            "result": nul_codec.encode({"text": output}),  # JSONB cannot hold U+0000
            "finish_reason": progress.finish_reason, "prompt_tokens": prompt_tokens,
            "completion_tokens": len(generated), "cached_tokens": progress.cached}
        if job.first_token_at is not None:
            values["first_token_at"] = job.first_token_at
        if job.checkpoint or job.resume_of is not None:
            values["recomputed_tokens"] = Job.recomputed_tokens + _recomputed(job, progress,
                                                                              request)
        if job.resume_of is not None and not job.resume_logged:
            job.resume_logged = True
            values["events"] = lifecycle.append_events(
                self.stamps.resumed_event(job, request, progress.cached))
        if not await self._finish_row(job, now, values, succeeded=True):
            return "aborted"
        await self._publish_end(job, job_stream.Final(job.attempt, progress.finish_reason,
                                                      prompt_tokens, len(generated),
                                                      settled=job.quota_settled))
        return "succeeded"

    async def _fail(self, job: ClaimedJob, status: int, code: str, message: str,
                    param: str | None = None) -> None:
        now = dt.datetime.now(dt.UTC)
        error: dict[str, Any] = {"code": code, "message": message, "status": status}
        if param is not None:
            error["param"] = param  # a batch's error file names it (service.batches.results)
        values: dict[str, Any] = {"error": error}
        if job.first_token_at is not None:
            values["first_token_at"] = job.first_token_at
        if await self._finish_row(job, now, values, succeeded=False):
            await self._publish_end(job, job_stream.Failure(job.attempt, status, code, message,
                                                            param=param))

    @tracing.traced("fairway.worker.finish")
    async def _finish_row(self, job: ClaimedJob, now: dt.datetime, values: dict[str, Any], *,
                          succeeded: bool) -> bool:
        """Final write, only if this attempt still owns the job (not cancelled, not re-leased)."""
        status = JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED
        prompt = int(values.get("prompt_tokens") or 0)
        completion = int(values.get("completion_tokens") or 0)

        # The row and its wake-up in one Core statement, built once (worker.end_write).
        statement, params = end_statement(
            job.job_id, attempt=job.attempt, worker_id=self.worker_id, succeeded=succeeded,
            values=values, now=now,
            wakeup=wakeups.JobEnded(job.job_id, self.worker_id, prompt, completion))

        # Only a response's end writes a second row (its webhook event, committed with the
        # status or not at all); every other end is one statement, committed by itself: one
        # round trip instead of BEGIN, the statement and COMMIT, and no row lock held.
        in_transaction = job.endpoint == RESPONSES_ENDPOINT

        async def write() -> Row[Any] | None:
            async with self.sessionmaker() as session:
                if not in_transaction:
                    await without_transaction(session)
                conn = await session.connection()
                row: Row[Any] | None = (await conn.execute(statement, params)).first()
                if row is not None and in_transaction:
                    await record_response_end_async(session, row)
                    await session.commit()
                return row

        # The result is only in this process: wait out a Postgres outage to deliver it.
        row = await through_outages(write, self.deps, give_up_after_s=FINAL_WRITE_PATIENCE_S)
        if row is not None:
            # After the commit (a failed write settles nothing), before the final stream
            # entry that tells the API whether to release its side (worker.accounting).
            job.quota_settled = await account_job_end(
                self.redis, job_id=row.id, tenant_id=row.tenant_id, values=values)
            # Named here, not only by a bound context: the realtime path logs this line
            # outside any job's context, and it is the line that says what a job cost.
            log.info("job ended: %s", status, extra={
                "job_id": str(row.id), "tenant_id": str(row.tenant_id), "attempt": job.attempt,
                "prompt_tokens": prompt, "completion_tokens": completion})
        if row is not None and job.obs is not None:
            job.obs.finished(str(status), prompt_tokens=prompt,
                             cached_tokens=values.get("cached_tokens") or 0)
        return row is not None

    async def _publish_end(self, job: ClaimedJob,
                           entry: job_stream.Final | job_stream.Failure) -> None:
        await self.outbox.put(job.job_id, entry)


def _recomputed(job: ClaimedJob, progress: Progress, request: EngineRequest) -> int:
    """Prefill a resumed attempt paid again, net of prefix-cache hits (0 for a first run)."""
    if not job.checkpoint and job.resume_of is None:
        return 0
    return max(0, len(request.prompt_token_ids) - progress.cached)

