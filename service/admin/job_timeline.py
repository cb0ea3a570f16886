"""A job's timeline for the explorer, from its row alone: the steps (its timestamps and its
``events``), the phases between them (what the dashboard draws as one bar), the derived
durations, and one sentence saying where its time went. Pure: a Job in, plain data out.

The row keeps one stamp per step, the latest attempt's (a preempted job's ``started_at`` is its
last start); what happened before is in ``events`` (preempted, resumed), so a resumed job shows
each of its runs."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from service.store.models.jobs import Job, JobStatus

# The phase each step opens (the bar's colours are keyed on these names).
_OPENS = {"created": "queued", "requeued": "queued", "assigned": "placed", "started": "prefill",
          "first_token": "decode", "preempted": "parked", "resumed": "decode"}
_ENDS = frozenset({"finished", "cancelled"})
# Steps stamped at the same instant sort in the order a job goes through them.
_ORDER = (*_OPENS, "finished", "cancelled")
# Said in the verdict.
_PHASE_WORDS = {"queued": "waiting in the queue", "placed": "placed on a worker, not started",
                "prefill": "reading the prompt (prefill)", "decode": "generating tokens",
                "parked": "parked after a preemption"}


@dataclass(frozen=True, slots=True)
class Step:
    at: dt.datetime
    type: str
    worker: str | None = None
    detail: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        return {"at": iso_ms(self.at), "type": self.type, "worker": self.worker,
                "detail": self.detail or {}}


def iso_ms(value: dt.datetime) -> str:
    """``2026-12-06T01:02:03.456Z``: UTC to the millisecond, as every explorer time is shown."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{value.microsecond // 1000:03d}Z"


def _parsed(raw: object) -> dt.datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def steps(job: Job) -> list[Step]:
    """Every known step, oldest first (a tie keeps the order a job goes through them)."""
    found = [Step(job.created_at, "created")]
    for event in job.events or []:
        at = _parsed(event.get("at"))
        kind = str(event.get("type", "event"))
        if at is None:
            continue
        detail = {k: v for k, v in event.items() if k not in ("at", "type", "worker")}
        found.append(Step(at, kind, event.get("worker"), detail))
    # Back in the queue with no preemption (its "preempted" event says so otherwise): a lease
    # that ran out, the worker gone.
    if job.queued_at and job.queued_at > job.created_at and not job.preemptions:
        found.append(Step(job.queued_at, "requeued"))
    # A stamp before a preemption belongs to the run that preemption ended (its worker); the
    # row's worker is the latest run's.
    runs_ended = sorted((s.at, s.worker) for s in found if s.type == "preempted")

    def worker_at(when: dt.datetime) -> str | None:
        return next((w for at, w in runs_ended if when <= at), job.worker_id)

    for stamp, kind in ((job.assigned_at, "assigned"), (job.started_at, "started"),
                        (job.first_token_at, "first_token")):
        if stamp is not None:
            found.append(Step(stamp, kind, worker_at(stamp)))
    if job.cancelled_at is not None:
        found.append(Step(job.cancelled_at, "cancelled", worker_at(job.cancelled_at)))
    elif job.finished_at is not None:
        found.append(Step(job.finished_at, "finished", worker_at(job.finished_at),
                          {"status": job.status, "finish_reason": job.finish_reason}))
    return sorted(found, key=lambda s: (s.at, _ORDER.index(s.type) if s.type in _ORDER else 99))


def phases(found: list[Step], now: dt.datetime) -> list[dict[str, Any]]:
    """Consecutive spans, each named by the step that opened it; an unfinished job's last span
    runs to ``now`` and is marked open."""
    spans: list[dict[str, Any]] = []
    current: tuple[str, dt.datetime] | None = None
    for step in found:
        if step.type not in _OPENS and step.type not in _ENDS:
            continue
        if current is not None and step.at >= current[1]:
            spans.append(_span(current[0], current[1], step.at, is_open=False))
        current = (_OPENS[step.type], step.at) if step.type in _OPENS else None
    if current is not None:
        spans.append(_span(current[0], current[1], max(now, current[1]), is_open=True))
    return [s for s in spans if s["ms"] > 0 or s["open"]]


def _span(phase: str, start: dt.datetime, end: dt.datetime, *, is_open: bool) -> dict[str, Any]:
    return {"phase": phase, "start": iso_ms(start), "end": iso_ms(end),
            "ms": _ms(start, end), "open": is_open}


def _ms(start: dt.datetime | None, end: dt.datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000)


def durations(job: Job, spans: list[dict[str, Any]]) -> dict[str, int | None]:
    """Milliseconds. queue: the time in the queued phases, as the bar draws them (parked time
    apart); ttft: arrival to first token, as the caller saw it; tpot: per token after the
    first; total: arrival to the end; parked: time spent parked after preemptions."""
    ended = job.cancelled_at or job.finished_at
    tpot = None
    completion = job.completion_tokens or 0
    if job.first_token_at and job.finished_at and completion > 1:
        tpot = round((job.finished_at - job.first_token_at).total_seconds() * 1000
                     / (completion - 1))
    return {"queue_ms": sum(int(p["ms"]) for p in spans if p["phase"] == "queued"),
            "ttft_ms": _ms(job.created_at, job.first_token_at),
            "tpot_ms": tpot,
            "total_ms": _ms(job.created_at, ended),
            "parked_ms": round(float(job.parked_seconds or 0.0) * 1000)}


def verdict(job: Job, spans: list[dict[str, Any]], took: dict[str, int | None]) -> str:
    """Where the time went, in one sentence: the SLO judgement first, then the longest phase."""
    parts: list[str] = []
    ttft, target = took["ttft_ms"], job.ttft_slo_ms
    if ttft is not None and target is not None:
        met = "met" if ttft <= target else "missed"
        parts.append(f"First token after {ttft:,} ms against a {target:,} ms target "
                     f"({met}).")
    elif ttft is not None:
        parts.append(f"First token after {ttft:,} ms (no TTFT target: "
                     f"{job.service_tier} class).")
    by_phase: dict[str, int] = {}
    for span in spans:
        by_phase[span["phase"]] = by_phase.get(span["phase"], 0) + int(span["ms"])
    total = sum(by_phase.values())
    if by_phase and total > 0:
        phase, ms = max(by_phase.items(), key=lambda kv: kv[1])
        parts.append(f"Most of its {total:,} ms was {_PHASE_WORDS.get(phase, phase)}: "
                     f"{ms:,} ms ({100 * ms // total}%).")
    if job.preemptions:
        parts.append(f"Preempted {job.preemptions} time{'s' if job.preemptions > 1 else ''}.")
    if job.status == JobStatus.FAILED:
        code = (job.error or {}).get("code") or "job_failed"
        parts.append(f"It failed: {code}.")
    elif job.status == JobStatus.CANCELLED:
        code = (job.error or {}).get("code") or "cancelled"
        parts.append(f"It was cancelled ({code}).")
    return " ".join(parts) or f"The job is {job.status}."


def timeline(job: Job, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """The explorer's timeline part of a job's detail."""
    found = steps(job)
    spans = phases(found, now or dt.datetime.now(dt.UTC))
    took = durations(job, spans)
    return {"steps": [s.view() for s in found], "phases": spans, "durations": took,
            "verdict": verdict(job, spans, took)}
