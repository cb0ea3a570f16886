"""Runs one claimed job on the engine: the logic behind the Celery task, testable without Celery.

Everything here runs on the engine host's event loop, so database and Redis calls are async.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.jobs.events import JOBS_CHANNEL, stream_key
from service.jobs.models import Job, JobStatus
from service.settings import Settings
from worker.engine.base import Engine, EngineError, EngineRequest, SamplingSpec

log = logging.getLogger("fairway.worker")


@dataclass(slots=True)
class ClaimedJob:
    job_id: uuid.UUID
    attempt: int
    endpoint: str
    request: dict[str, Any]
    max_tokens: int
    priority: int


def engine_request_id(job_id: uuid.UUID | str, attempt: int) -> str:
    return f"{job_id}:{attempt}"


class JobRunner:
    def __init__(self, *, engine: Engine, settings: Settings, worker_id: str,
                 sessionmaker: async_sessionmaker[AsyncSession], redis: Redis) -> None:
        self.engine = engine
        self.settings = settings
        self.worker_id = worker_id
        self.sessionmaker = sessionmaker
        self.redis = redis
        self.active: set[str] = set()  # engine request ids running here

    async def run(self, job_id: str, attempt: int) -> str:
        """Returns the outcome: skipped | succeeded | failed | aborted."""
        claimed = await self._claim(uuid.UUID(job_id), attempt)
        if claimed is None:
            log.info("stale or duplicate delivery ignored",
                     extra={"job_id": job_id, "attempt": attempt})
            return "skipped"
        rid = engine_request_id(claimed.job_id, attempt)
        self.active.add(rid)
        try:
            return await self._execute(claimed, rid)
        except EngineError as exc:
            await self._fail(claimed, 400, "invalid_request", str(exc))
            return "failed"
        except Exception:
            log.exception("job crashed on the engine", extra={"job_id": job_id})
            await self._fail(claimed, 500, "engine_error", "The engine failed on this request.")
            return "failed"
        finally:
            self.active.discard(rid)

    async def _claim(self, job_id: uuid.UUID, attempt: int) -> ClaimedJob | None:
        """Only the delivery for the current attempt, sent to this worker, may start the job."""
        now = dt.datetime.now(dt.UTC)
        lease = now + dt.timedelta(seconds=self.settings.lease_seconds)
        async with self.sessionmaker() as session:
            row = (await session.execute(
                update(Job)
                .where(Job.id == job_id, Job.attempt == attempt,
                       Job.status == JobStatus.ASSIGNED, Job.worker_id == self.worker_id)
                .values(status=JobStatus.RUNNING, started_at=now, updated_at=now,
                        lease_expires_at=lease)
                .returning(Job.endpoint, Job.request, Job.max_tokens, Job.priority)
            )).first()
            await session.commit()
        if row is None:
            return None
        return ClaimedJob(job_id, attempt, row.endpoint, row.request, row.max_tokens,
                          row.priority)

    def _build_request(self, job: ClaimedJob, rid: str) -> EngineRequest:
        body = job.request
        if job.endpoint == "chat.completions":
            messages = [_plain_message(m) for m in body["messages"]]
            prompt_ids = self.engine.encode_chat(messages)
        else:
            prompt_ids = self.engine.encode(body["prompt"])
        limit = self.settings.max_model_len
        if len(prompt_ids) + job.max_tokens > limit:
            raise EngineError(
                f"This model's maximum context length is {limit} tokens; the prompt has "
                f"{len(prompt_ids)} and max_tokens asks for {job.max_tokens} more.")
        sampling = SamplingSpec(max_tokens=job.max_tokens,
                                temperature=float(body.get("temperature", 1.0)),
                                top_p=float(body.get("top_p", 1.0)), seed=body.get("seed"),
                                stop=list(body.get("stop") or []))
        return EngineRequest(rid, prompt_ids, sampling, priority=job.priority)

    async def _execute(self, job: ClaimedJob, rid: str) -> str:
        request = self._build_request(job, rid)
        key = stream_key(job.job_id)
        pieces: list[str] = []
        completion_tokens = 0
        finish_reason: str | None = None
        prompt_tokens = len(request.prompt_token_ids)
        cached = 0
        async for delta in self.engine.generate(request):
            if delta.token_ids or delta.text:
                if completion_tokens == 0:
                    await self._mark_first_token(job)
                completion_tokens += len(delta.token_ids)
                pieces.append(delta.text)
                await self.redis.xadd(key, {"type": "delta", "attempt": job.attempt,
                                            "text": delta.text, "tokens": len(delta.token_ids)})
            if delta.finished:
                finish_reason = delta.finish_reason
                prompt_tokens = delta.num_prompt_tokens or prompt_tokens
                cached = delta.num_cached_tokens
        if finish_reason in (None, "abort"):
            return "aborted"  # cancelled or taken back; whoever aborted owns the row's status
        return await self._succeed(job, "".join(pieces), finish_reason, prompt_tokens,
                                   completion_tokens, cached)

    async def _mark_first_token(self, job: ClaimedJob) -> None:
        async with self.sessionmaker() as session:
            await session.execute(update(Job).where(Job.id == job.job_id,
                                                    Job.attempt == job.attempt)
                                  .values(first_token_at=dt.datetime.now(dt.UTC)))
            await session.commit()

    async def _succeed(self, job: ClaimedJob, output: str, finish_reason: str,
                       prompt_tokens: int, completion_tokens: int, cached: int) -> str:
        now = dt.datetime.now(dt.UTC)
        values = {"status": JobStatus.SUCCEEDED, "result": {"text": output},
                  "finish_reason": finish_reason, "prompt_tokens": prompt_tokens,
                  "completion_tokens": completion_tokens, "cached_tokens": cached}
        if not await self._finish_row(job, now, values):
            return "aborted"
        await self._publish_end(job, {"type": "final", "finish_reason": finish_reason,
                                      "prompt_tokens": prompt_tokens,
                                      "completion_tokens": completion_tokens})
        return "succeeded"

    async def _fail(self, job: ClaimedJob, status: int, code: str, message: str) -> None:
        now = dt.datetime.now(dt.UTC)
        values = {"status": JobStatus.FAILED,
                  "error": {"code": code, "message": message, "status": status}}
        if await self._finish_row(job, now, values):
            await self._publish_end(job, {"type": "error", "status": status, "code": code,
                                          "message": message})

    async def _finish_row(self, job: ClaimedJob, now: dt.datetime, values: dict[str, Any]) -> bool:
        """Final write, only if this attempt still owns the job (not cancelled, not re-leased)."""
        async with self.sessionmaker() as session:
            row = (await session.execute(
                update(Job)
                .where(Job.id == job.job_id, Job.attempt == job.attempt,
                       Job.status == JobStatus.RUNNING, Job.worker_id == self.worker_id)
                .values(finished_at=now, updated_at=now, lease_expires_at=None, **values)
                .returning(Job.id)
            )).first()
            if row is not None:
                await session.execute(text("SELECT pg_notify(:c, :p)"), {
                    "c": JOBS_CHANNEL, "p": f"done:{job.job_id}:{self.worker_id}"})
            await session.commit()
        return row is not None

    async def _publish_end(self, job: ClaimedJob, fields: dict[str, Any]) -> None:
        key = stream_key(job.job_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(key, {"attempt": job.attempt, **fields})
            pipe.expire(key, self.settings.stream_ttl_seconds)
            await pipe.execute()


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    role = "system" if message["role"] == "developer" else message["role"]
    return {"role": role, "content": content or ""}
