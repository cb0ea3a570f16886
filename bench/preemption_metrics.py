"""Metrics for bench/preemption_vs_vllm.py: one streaming request as the client saw it, the
per-setup summary, and Fairway's jobs table read back (preemptions, recompute, parked time)."""

from __future__ import annotations

import argparse
import contextlib
import math
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.harness import pct
from bench.preemption_report import SETUPS, delta


@dataclass
class Call:
    """One streaming chat request as the client saw it (times are time.perf_counter())."""

    label: str
    sent: float = math.nan
    first: float = math.nan
    done: float = math.nan
    status: int = 0
    text: str = ""
    completion_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    error: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.first - self.sent

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and self.finish_reason is not None


def fairway_jobs(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT id, kind, service_tier, priority, status, completion_tokens, preemptions,"
            " recomputed_tokens, parked_seconds, events, result->>'text' AS text"
            " FROM jobs ORDER BY created_at").fetchall()


def job_id_of(response_id: str | None) -> uuid.UUID | None:
    with contextlib.suppress(ValueError, AttributeError, IndexError):
        return uuid.UUID(str(response_id).split("-", 1)[1])
    return None


def summarize(setup: str, opts: argparse.Namespace, idle: list[Call], batch: list[Call],
              realtime: list[Call], before: dict[str, float | None],
              after: dict[str, float | None], jobs: list[dict[str, Any]] | None,
              streaming_at_rt: int) -> dict[str, Any]:
    idle_ms = [c.ttft_s * 1000 for c in idle if c.ok]
    busy_ms = [c.ttft_s * 1000 for c in realtime if c.ok]
    tokens = sum(c.completion_tokens or 0 for c in batch)
    wall = max(c.done for c in batch) - min(c.sent for c in batch)
    out: dict[str, Any] = {
        "setup": setup, "name": SETUPS[setup],
        "idle_ttft_p50_ms": pct(idle_ms, 50), "idle_ttft_p99_ms": pct(idle_ms, 99),
        "busy_ttft_p50_ms": pct(busy_ms, 50), "busy_ttft_p99_ms": pct(busy_ms, 99),
        "busy_ttft_max_ms": pct(busy_ms, 100),
        "batch_tok_s": tokens / wall, "batch_wall_s": wall, "batch_tokens": tokens,
        "batch_streaming_when_realtime_began": streaming_at_rt,
        "batch_finished": sum(1 for c in batch
                              if c.ok and c.completion_tokens == opts.batch_tokens),
        "realtime_failed": sum(1 for c in realtime + idle if not c.ok),
        "engine_preemptions": delta(after["engine_preemptions"], before["engine_preemptions"]),
        "errors": [f"{c.label}: {c.error}" for c in idle + batch + realtime if c.error],
        "idle": [asdict(c) for c in idle], "batch": [asdict(c) for c in batch],
        "realtime": [asdict(c) for c in realtime],
    }
    out["busy_over_idle_p50"] = out["busy_ttft_p50_ms"] / out["idle_ttft_p50_ms"]
    out["busy_over_idle_p99"] = out["busy_ttft_p99_ms"] / out["idle_ttft_p99_ms"]
    if jobs is None:
        # No preemption, no recompute; vLLM does not count recomputed prefill otherwise.
        out["recomputed_tokens"] = 0 if out["engine_preemptions"] == 0 else None
        return out
    ids = {job_id_of(c.response_id) for c in batch}
    mine = [j for j in jobs if j["id"] in ids]
    out.update(
        parked_preemptions_metric=delta(after.get("parked_batch"), before.get("parked_batch")),
        job_preemptions=sum(j["preemptions"] for j in jobs),
        recomputed_tokens=sum(j["recomputed_tokens"] for j in jobs),
        parked_seconds=sum(j["parked_seconds"] for j in jobs),
        batch_jobs_succeeded=sum(1 for j in mine if j["status"] == "succeeded"
                                 and j["completion_tokens"] == opts.batch_tokens),
        batch_jobs_matched=len(mine),
        job_events=dict(Counter(e.get("type", "?")
                                for j in jobs for e in j["events"] or [])),
        job_status=dict(Counter(f"{j['kind']}/{j['status']}" for j in jobs)))
    texts = {j["id"]: j["text"] for j in mine}
    out["db_text_matches_stream"] = sum(
        1 for c in batch if texts.get(job_id_of(c.response_id)) == c.text and c.text)
    return out
