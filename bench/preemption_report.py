"""The side-by-side table for bench/preemption_vs_vllm.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, cast

SETUPS = {"a": "vLLM FCFS", "b": "vLLM priority", "c": "Fairway"}
MAX_NUM_SEQS = 8
REALTIME_TOKENS = 16


def delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def same_outputs(results: dict[str, dict[str, Any]], setup: str, ref: str = "b") -> str:
    if setup == ref or ref not in results or setup not in results:
        return "(ref)" if setup == ref else "-"
    mine = [c["text"] for c in results[setup]["batch"]]
    theirs = [c["text"] for c in results[ref]["batch"]]
    return f"{sum(1 for x, y in zip(mine, theirs, strict=True) if x and x == y)}/{len(mine)}"


def fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return format(value, spec)


def in_engine(r: dict[str, Any]) -> float | None:
    """Fairway's worker counts parked jobs into vllm:num_preemptions as well: take them out."""
    if r["setup"] != "c":
        return cast(float | None, r["engine_preemptions"])
    return delta(r["engine_preemptions"], r["parked_preemptions_metric"])


def print_table(results: dict[str, dict[str, Any]], opts: argparse.Namespace) -> None:
    order = [s for s in SETUPS if s in results]
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("realtime TTFT idle p50 ms", lambda r: fmt(r["idle_ttft_p50_ms"], ".0f")),
        ("realtime TTFT idle p99 ms", lambda r: fmt(r["idle_ttft_p99_ms"], ".0f")),
        ("realtime TTFT flood p50 ms", lambda r: fmt(r["busy_ttft_p50_ms"], ".0f")),
        ("realtime TTFT flood p99 ms", lambda r: fmt(r["busy_ttft_p99_ms"], ".0f")),
        ("flood / idle, p50", lambda r: fmt(r["busy_over_idle_p50"], ".1f") + "x"),
        ("flood / idle, p99", lambda r: fmt(r["busy_over_idle_p99"], ".1f") + "x"),
        ("realtime requests failed", lambda r: str(r["realtime_failed"])),
        ("batch output tok/s (flood wall)", lambda r: fmt(r["batch_tok_s"], ".1f")),
        ("batch flood wall s", lambda r: fmt(r["batch_wall_s"], ".1f")),
        ("batch finished, all tokens", lambda r: f"{r['batch_finished']}/{opts.batch}"),
        ("batch streaming at 1st realtime",
         lambda r: str(r["batch_streaming_when_realtime_began"])),
        ("preemptions: vllm:num_preemptions", lambda r: fmt(r["engine_preemptions"], ".0f")),
        ("  jobs parked, checkpoint (table)", lambda r: fmt(r.get("job_preemptions"), "d")),
        ("  inside the engine (recompute)", lambda r: fmt(in_engine(r), ".0f")),
        ("recomputed tokens (jobs table)", lambda r: fmt(r["recomputed_tokens"], "d")),
        ("batch texts equal to (b)", lambda r: same_outputs(results, r["setup"])),
    ]
    width = 36
    print(f"\n{opts.batch} batch x {opts.batch_tokens} tokens (greedy, ignore_eos) flooding "
          f"{MAX_NUM_SEQS} slots; {opts.realtime} realtime x {REALTIME_TOKENS} tokens, Poisson "
          f"mean gap {opts.rt_gap:g} s; idle = {opts.idle_probes} sequential before the flood")
    print(f"{'':<{width}}" + "".join(f"{f'({s}) {SETUPS[s]}':>18}" for s in order))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(results[s]):>18}" for s in order))
    fairway = results.get("c")
    if fairway is not None:
        print(f"\nFairway jobs: {fairway['job_status']}; events {fairway['job_events']}; "
              f"parked {fairway['parked_seconds']:.1f} s in all; worker /metrics parked batch "
              f"{fmt(fairway['parked_preemptions_metric'], '.0f')}; batch jobs succeeded with all "
              f"tokens (table) {fairway['batch_jobs_succeeded']}/{fairway['batch_jobs_matched']};"
              f" streamed text = stored text {fairway['db_text_matches_stream']}/{opts.batch}")
    for s in order:
        for err in results[s]["errors"][:5]:
            print(f"  ({s}) error: {err}")


# -- main ------------------------------------------------------------------------------------
