"""Metrics for bench/realtime_vs_vllm.py: first-content TTFT from vllm bench's results, the
summary row per run, and Fairway's per-request timeline read back from the jobs table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row

from bench.harness import pct
from bench.realtime_report import OUTPUT_LEN, SEGMENTS


def content_ttfts(result: dict[str, Any]) -> list[float]:
    """Seconds to the first chunk with text. vllm bench's TTFT is its first chunk with
    `choices`: on a server that sends a role-only chunk first (bare vLLM), text comes one
    chunk later; where the role rides on the first text chunk (Fairway), that chunk is it.
    `role_first` comes from the idle probe, which looks at the chunks themselves."""
    if not result.get("role_first", True):
        return list(result["ttfts"])
    return [t + (itl[0] if itl else 0.0) for t, itl in zip(result["ttfts"], result["itls"],
                                                           strict=True)]


def summarize(result: dict[str, Any]) -> dict[str, float]:
    ok = [not e for e in result["errors"]]
    first = [t for t, good in zip(content_ttfts(result), ok, strict=True) if good]
    tpots = [(lat - f) / (n - 1) for lat, f, n, good in
             zip(result["latencies"], content_ttfts(result), result["output_lens"], ok,
                 strict=True) if good and n > 1]
    return {
        "output_tok_s": result["output_throughput"],
        "req_s": result["request_throughput"],
        "ttft_p50_ms": result["median_ttft_ms"], "ttft_p99_ms": result["p99_ttft_ms"],
        "ttft_content_p50_ms": pct(first, 50) * 1000,
        "ttft_content_p99_ms": pct(first, 99) * 1000,
        "tpot_p50_ms": result["median_tpot_ms"],
        "tpot_content_p50_ms": pct(tpots, 50) * 1000,
        "e2e_p50_ms": result["median_e2el_ms"],
        "completed": result["completed"], "failed": result["failed"],
        "all_output_lens_ok": float(all(n == OUTPUT_LEN for n in result["output_lens"])),
        "mean_prompt_tokens": float(np.mean(result["input_lens"])),
        "duration_s": result["duration"],
    }


JOB_SQL = """
SELECT created_at, assigned_at, started_at, first_token_at, finished_at, attempt,
       result->>'text' AS text
  FROM jobs WHERE created_at >= %s AND created_at <= %s AND status = 'succeeded'
"""


def fetch_jobs(db_url: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    with psycopg.connect(db_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(JOB_SQL, (dt.datetime.fromisoformat(result["since"]),
                              dt.datetime.fromisoformat(result["until"])))
        return list(cur.fetchall())


def client_times(result: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Generated text -> (wall time sent, wall time of the first content chunk)."""
    out: dict[str, tuple[float, float]] = {}
    for text, start, first in zip(result["generated_texts"], result["start_times"],
                                  content_ttfts(result), strict=True):
        sent = start + result["wall_offset"]
        out[text] = (sent, sent + first)
    return out


def job_segments(job: dict[str, Any], sent: float, first_seen: float) -> dict[str, float]:
    ts = {k: job[k].timestamp() for k in ("created_at", "assigned_at", "started_at",
                                          "first_token_at")}
    return {"api_ingest": ts["created_at"] - sent,
            "dispatch": ts["assigned_at"] - ts["created_at"],
            "delivery": ts["started_at"] - ts["assigned_at"],
            "engine_first_token": ts["first_token_at"] - ts["started_at"],
            "relay": first_seen - ts["first_token_at"],
            "server_ttft": ts["first_token_at"] - ts["created_at"],
            "client_ttft": first_seen - sent}


def dispatch_lag(db_url: str, result: dict[str, Any]) -> dict[str, Any]:
    """Per-request timeline from the jobs table, matched to the client by generated text."""
    jobs = fetch_jobs(db_url, result)
    seen = client_times(result)
    rows = [job_segments(j, *seen[j["text"]]) for j in jobs if j["text"] in seen]
    out: dict[str, Any] = {"jobs": len(jobs), "matched": len(rows),
                           "retried": sum(1 for j in jobs if j["attempt"] > 1)}
    for seg in SEGMENTS:
        vals = [r[seg] * 1000 for r in rows]
        out[seg] = {"p50_ms": pct(vals, 50), "p90_ms": pct(vals, 90), "max_ms": pct(vals, 100)}
    spread = [j["assigned_at"].timestamp() for j in jobs]
    out["assign_spread_ms"] = (max(spread) - min(spread)) * 1000 if spread else float("nan")
    return out
