"""What became of one fault's work, from the clients' records and the system's own: job rows in
Postgres, each job's Redis stream, usage rows, and the batch's output and error files."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from sqlalchemy import func, select

from service.cli.chaos.batch_client import BatchRecord
from service.cli.chaos.load import HUNG, Load
from service.store import job_stream
from service.store.db import sync_session
from service.store.keys import stream_key
from service.store.models.jobs import Job
from service.store.models.usage import UsageDaily
from service.store.nul_codec import result_text
from service.store.quota_store import TenantKeys

FINAL_STATUSES = ("succeeded", "failed", "cancelled")


@dataclass
class Findings:
    accepted: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)  # which request saw which error
    statuses: Counter[str] = field(default_factory=Counter)  # the jobs' ends, for the record
    quota_held: list[str] = field(default_factory=list)  # quota still held once all ended


@dataclass(frozen=True)
class _JobRow:
    id: uuid.UUID
    status: str
    batch: bool
    worker_id: str | None
    text: str
    error_code: str | None


def active_jobs(database_url: str, tenant_ids: list[uuid.UUID]) -> int:
    with sync_session(database_url) as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(
            Job.tenant_id.in_(tenant_ids), Job.status.not_in(FINAL_STATUSES))) or 0)


def audit(database_url: str, redis: Redis, tenant_ids: list[uuid.UUID], load: Load,
          batch: BatchRecord | None) -> Findings:
    found = Findings()
    jobs = _jobs(database_url, tenant_ids)
    found.statuses.update(f"{j.status} {j.error_code}" if j.error_code else j.status
                          for j in jobs.values())
    realtime = [j for j in jobs.values() if not j.batch]
    found.accepted = len(realtime) + (len(batch.custom_ids) if batch and batch.accepted else 0)
    found.lost += [f"job {j.id.hex} still {j.status}" for j in realtime
                   if j.status not in FINAL_STATUSES]
    _check_clients(load, jobs, found)
    _check_streams(redis, realtime, found)
    _check_usage(database_url, tenant_ids, jobs, found)
    if batch is not None:
        _check_batch(batch, found)
    _check_quota(redis, tenant_ids, found)
    return found


def _jobs(database_url: str, tenant_ids: list[uuid.UUID]) -> dict[str, _JobRow]:
    with sync_session(database_url) as session:
        rows = session.execute(select(Job.id, Job.status, Job.batch_id, Job.worker_id,
                                      Job.result, Job.error)
                               .where(Job.tenant_id.in_(tenant_ids))).all()
    return {r.id.hex: _JobRow(r.id, r.status, r.batch_id is not None, r.worker_id,
                              result_text(r.result) if r.result else "",
                              (r.error or {}).get("code")) for r in rows}


def _check_clients(load: Load, jobs: dict[str, _JobRow], found: Findings) -> None:
    """Each answer against the job's stored result: shorter is a truncation (silent unless
    the client was told), anything else that differs a duplication or corruption."""
    for s in load.streams:
        job = jobs.get(s.job_id or "")
        if s.error:
            found.errors[s.error] += 1
            found.error_samples.append(
                f"stream of job {s.job_id} ({s.tier}): {s.error} after {len(s.text)} chars, "
                f"{s.ended - s.started:.1f} s; job {job.status if job else 'unknown'}")
        if s.status == 200 and job is None:
            found.lost.append(f"stream answered 200 for job {s.job_id}, which has no row")
        if s.silent:
            found.truncated.append(f"stream of job {s.job_id} ended silently after "
                                   f"{len(s.text)} chars")
        elif s.hung:
            found.truncated.append(f"stream of job {s.job_id} hung after {len(s.text)} chars "
                                   f"(job {job.status if job else 'unknown'}): nothing "
                                   f"until the client gave up")
        elif s.finished and job is not None:
            _compare(f"stream of job {s.job_id}", s.text, job, found)
    for c in load.calls:
        if c.error:
            found.errors[c.error] += 1
            found.error_samples.append(f"call ({c.tier}): {c.error} after "
                                       f"{c.ended - c.started:.1f} s")
        if c.error == HUNG:
            found.truncated.append("a non-streamed request hung: no answer or error until "
                                   "the client gave up")
        if c.status == 200 and c.content is not None:
            job = jobs.get(c.job_id or "")
            if job is None:
                found.lost.append(f"call answered 200 for job {c.job_id}, which has no row")
            else:
                _compare(f"answer of job {c.job_id}", c.content, job, found)


def _compare(what: str, seen: str, job: _JobRow, found: Findings) -> None:
    if job.status != "succeeded":
        found.duplicated.append(f"{what}: the client got an answer, the job is {job.status}")
    elif seen == job.text:
        return
    elif job.text.startswith(seen):
        found.truncated.append(f"{what}: {len(seen)} of {len(job.text)} chars")
    else:
        found.duplicated.append(f"{what}: {len(seen)} chars differ from the stored "
                                f"{len(job.text)}")


def _check_streams(redis: Redis, realtime: list[_JobRow], found: Findings) -> None:
    """A job's stream carries one end (a final or an error entry); two mean it ended twice."""
    pipe = redis.pipeline(transaction=False)
    for job in realtime:
        pipe.xrange(stream_key(job.id))
    for job, entries in zip(realtime, pipe.execute(), strict=True):
        ends = sum(1 for _, raw in entries
                   if isinstance(job_stream.parse(raw), job_stream.Final | job_stream.Failure))
        if ends > 1:
            found.duplicated.append(f"job {job.id.hex} ended {ends} times in its stream")


def _check_usage(database_url: str, tenant_ids: list[uuid.UUID], jobs: dict[str, _JobRow],
                 found: Findings) -> None:
    """Usage counts a job once, with the write that ended it on a worker; more is a double."""
    with sync_session(database_url) as session:
        counted = int(session.scalar(select(func.coalesce(func.sum(UsageDaily.requests), 0))
                                     .where(UsageDaily.tenant_id.in_(tenant_ids))) or 0)
    ended = sum(1 for j in jobs.values()
                if j.status in ("succeeded", "failed") and j.worker_id is not None)
    if counted > ended:
        found.duplicated.append(f"usage counts {counted} finished jobs, workers ended {ended}")


def _check_quota(redis: Redis, tenant_ids: list[uuid.UUID], found: Findings) -> None:
    """Once every request and the batch ended, a tenant holds no concurrency slot and no
    enqueued batch tokens; what is still held blocks it until the reservation's TTL."""
    now = time.time()
    pipe = redis.pipeline(transaction=False)
    for tenant_id in tenant_ids:
        keys = TenantKeys(str(tenant_id))
        pipe.zcount(keys.conc, now, "+inf")
        pipe.get(keys.batch)
    answers = pipe.execute()
    for i, tenant_id in enumerate(tenant_ids):
        slots, batch_tokens = int(answers[2 * i]), int(answers[2 * i + 1] or 0)
        if slots:
            found.quota_held.append(f"tenant {tenant_id}: {slots} concurrency slot(s)")
        if batch_tokens:
            found.quota_held.append(f"tenant {tenant_id}: {batch_tokens} batch tokens enqueued")


def _check_batch(batch: BatchRecord, found: Findings) -> None:
    found.errors.update(batch.client_errors)
    if not batch.accepted:
        return
    if batch.status != "completed":
        found.errors[f"batch {batch.status}"] += 1
    seen: Counter[str] = Counter()
    for line in batch.output + batch.errors:
        seen[str(line.get("custom_id"))] += 1
        code = _line_error(line)
        if code:
            found.errors[f"batch-line {code}"] += 1
    found.lost += [f"batch line {cid} in neither file" for cid in batch.custom_ids
                   if cid not in seen]
    found.duplicated += [f"batch line {cid} appears {n} times" for cid, n in seen.items()
                         if n > 1]


def _line_error(line: dict[str, Any]) -> str | None:
    error = line.get("error")
    if isinstance(error, dict):
        return str(error.get("code") or "error")
    response = line.get("response") or {}
    status = response.get("status_code") if isinstance(response, dict) else None
    return f"status {status}" if status not in (None, 200) else None
