"""Tables and the results file for bench/realtime_vs_vllm.py (medians over rounds)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.harness import MAX_MODEL_LEN

MAX_NUM_SEQS = 64
INPUT_LEN = 128
OUTPUT_LEN = 64
TARGET_RATIO = 0.99  # the realtime target: output throughput at least 0.99x bare vLLM
TARGET_TTFT_MS = 3.0  # the realtime target: idle TTFT at most +3 ms p50 (+5 ms p99)
PROBES = 10  # sequential single requests on the idle server: the fixed per-request cost
SEGMENTS = ("api_ingest", "dispatch", "delivery", "engine_first_token", "relay",
            "server_ttft", "client_ttft")


def median_of(rounds: list[dict[str, Any]], system: str, key: str) -> float:
    return float(np.median([r[system]["summary"][key] for r in rounds]))


def median_lag(rounds: list[dict[str, Any]], seg: str, stat: str) -> float:
    return float(np.median([r["fairway"]["lag"][seg][stat] for r in rounds]))


ROWS = [("output tok/s", "output_tok_s", "{:.1f}"), ("req/s", "req_s", "{:.3f}"),
        ("TTFT p50 ms (first content)", "ttft_content_p50_ms", "{:.0f}"),
        ("TTFT p99 ms (first content)", "ttft_content_p99_ms", "{:.0f}"),
        ("TTFT p50 ms (vllm bench: 1st chunk)", "ttft_p50_ms", "{:.0f}"),
        ("TTFT p99 ms (vllm bench: 1st chunk)", "ttft_p99_ms", "{:.0f}"),
        ("TPOT p50 ms (from first content)", "tpot_content_p50_ms", "{:.1f}"),
        ("TPOT p50 ms (vllm bench)", "tpot_p50_ms", "{:.1f}"),
        ("E2E p50 ms", "e2e_p50_ms", "{:.0f}"),
        ("failed requests", "failed", "{:.0f}"),
        ("mean prompt tokens (usage)", "mean_prompt_tokens", "{:.1f}")]


def comparison(rounds: list[dict[str, Any]]) -> dict[str, float]:
    def med(system: str, key: str) -> float:
        return median_of(rounds, system, key)

    return {"throughput_ratio": med("fairway", "output_tok_s") / med("vllm", "output_tok_s"),
            "ttft_content_p50_diff_ms": med("fairway", "ttft_content_p50_ms")
            - med("vllm", "ttft_content_p50_ms"),
            "ttft_content_p99_diff_ms": med("fairway", "ttft_content_p99_ms")
            - med("vllm", "ttft_content_p99_ms"),
            "ttft_bench_p50_diff_ms": med("fairway", "ttft_p50_ms") - med("vllm", "ttft_p50_ms"),
            "ttft_bench_p99_diff_ms": med("fairway", "ttft_p99_ms") - med("vllm", "ttft_p99_ms"),
            "tpot_content_p50_ratio": med("fairway", "tpot_content_p50_ms")
            / med("vllm", "tpot_content_p50_ms"),
            "idle_ttft_p50_diff_ms": median_probe(rounds, "fairway") - median_probe(rounds, "vllm"),
            "idle_ttft_p99_diff_ms": median_probe(rounds, "fairway", "ttft_p99_ms")
            - median_probe(rounds, "vllm", "ttft_p99_ms")}


def median_probe(rounds: list[dict[str, Any]], system: str, key: str = "ttft_p50_ms") -> float:
    return float(np.median([r[system]["probe"][key] for r in rounds]))


def other_load_cores(raw: dict[str, Any]) -> float:
    """CPU the rest of the machine (other people's work) used during this load, in cores."""
    cpu = raw["cpu_s"]
    ours = sum(v for k, v in cpu.items() if k != "machine-busy")
    return float((cpu["machine-busy"] - ours) / raw["duration"])


def print_rounds(rounds: list[dict[str, Any]]) -> None:
    print("\nper round (other load = CPU used by processes not in the benchmark):")
    for r in rounds:
        v, f = r["vllm"], r["fairway"]
        ratio = f["summary"]["output_tok_s"] / v["summary"]["output_tok_s"]
        print(f"  round {r['round']} ({' then '.join(r['order'])}): "
              f"vLLM {v['summary']['output_tok_s']:.1f} tok/s "
              f"(other load {other_load_cores(v['raw']):.2f} cores), "
              f"Fairway {f['summary']['output_tok_s']:.1f} tok/s "
              f"(other load {other_load_cores(f['raw']):.2f} cores, "
              f"{f['summary']['failed']:.0f} failed), ratio {ratio:.3f}")


def print_probe(rounds: list[dict[str, Any]]) -> None:
    v, f = median_probe(rounds, "vllm"), median_probe(rounds, "fairway")
    probes = len(rounds[0]["vllm"]["probe"]["samples"])
    print(f"\nidle TTFT ({probes} sequential streaming requests, short prompt, first content): "
          f"vLLM p50 {v:.1f} ms, Fairway p50 {f:.1f} ms, difference {f - v:+.1f} ms "
          f"(target <= +{TARGET_TTFT_MS:.0f} ms)")
    lag = rounds[-1]["fairway"]["probe"]["lag_p50_ms"]
    print("  Fairway idle p50 breakdown: " + ", ".join(
        f"{k} {lag[k]:.1f}" for k in SEGMENTS if k != "server_ttft") + " (ms)")


def print_table(rounds: list[dict[str, Any]], cmp: dict[str, float]) -> None:
    n = len(rounds)
    title = f"median of {n} rounds" if n > 1 else "1 round"
    print(f"\nFairway vs bare vLLM ({title}; random {INPUT_LEN} in / {OUTPUT_LEN} out, "
          f"{rounds[0]['vllm']['summary']['completed']} prompts at once)")
    print(f"{'metric':<38}{'vLLM':>12}{'Fairway':>12}")
    for label, key, fmt in ROWS:
        print(f"{label:<38}{fmt.format(median_of(rounds, 'vllm', key)):>12}"
              f"{fmt.format(median_of(rounds, 'fairway', key)):>12}")
    ok = "meets" if cmp["throughput_ratio"] >= TARGET_RATIO else "misses"
    print(f"\noutput-throughput ratio Fairway/vLLM: {cmp['throughput_ratio']:.3f} "
          f"({ok} the >= {TARGET_RATIO} target)")
    ok = "meets" if cmp["ttft_content_p50_diff_ms"] <= TARGET_TTFT_MS else "misses"
    print(f"TTFT difference, first content: p50 {cmp['ttft_content_p50_diff_ms']:+.0f} ms "
          f"({ok} the <= +{TARGET_TTFT_MS:.0f} ms target), "
          f"p99 {cmp['ttft_content_p99_diff_ms']:+.0f} ms")
    print(f"TTFT difference as vllm bench counts it (to the first SSE chunk): "
          f"p50 {cmp['ttft_bench_p50_diff_ms']:+.0f} ms, "
          f"p99 {cmp['ttft_bench_p99_diff_ms']:+.0f} ms")


def print_lag(rounds: list[dict[str, Any]]) -> None:
    lag = rounds[-1]["fairway"]["lag"]
    print(f"\nFairway per-request timeline from the jobs table, burst (median over rounds; last "
          f"round: {lag['matched']}/{lag['jobs']} jobs matched to requests, "
          f"{lag['retried']} retried):")
    print(f"{'segment':<58}{'p50 ms':>9}{'p90 ms':>9}{'max ms':>9}")
    names = {"api_ingest": "client send -> created_at (HTTP, auth, tx start)",
             "dispatch": "created_at -> assigned_at (commit, NOTIFY, dispatcher)",
             "delivery": "assigned_at -> started_at (Celery -> worker claim)",
             "engine_first_token": "started_at -> first_token_at (tokenize, queue, prefill)",
             "relay": "first_token_at -> client sees text (DB, Redis, SSE)",
             "server_ttft": "created_at -> first_token_at",
             "client_ttft": "client send -> first content (total)"}
    for seg in SEGMENTS:
        print(f"{names[seg]:<58}{median_lag(rounds, seg, 'p50_ms'):>9.1f}"
              f"{median_lag(rounds, seg, 'p90_ms'):>9.1f}{median_lag(rounds, seg, 'max_ms'):>9.1f}")
    print(f"first to last assigned_at: {lag['assign_spread_ms']:.0f} ms")


def cpu_lines(cpu: Mapping[str, float], duration_s: float) -> list[str]:
    ours = sum(v for k, v in cpu.items() if k != "machine-busy")
    rows = sorted(((k, v) for k, v in cpu.items() if k != "machine-busy"), key=lambda kv: -kv[1])
    rows.append(("everything else on the machine", cpu["machine-busy"] - ours))
    return [f"  {k:<40}{v:>8.1f} s {v / duration_s:>6.2f} cores" for k, v in rows]


def print_cpu(rounds: list[dict[str, Any]]) -> None:
    print(f"\nCPU used during the measured load (round {rounds[-1]['round']}; "
          f"{psutil.cpu_count()} cores):")
    for system in ("vllm", "fairway"):
        raw = rounds[-1][system]["raw"]
        print(f" {system} (load took {raw['duration']:.1f} s):")
        print("\n".join(cpu_lines(raw["cpu_s"], raw["duration"])))


def without_texts(value: Any) -> Any:
    """A copy for the JSON file, less the generated texts (only used to match jobs)."""
    if isinstance(value, dict):
        return {k: without_texts(v) for k, v in value.items() if k != "generated_texts"}
    if isinstance(value, list):
        return [without_texts(v) for v in value]
    return value


def write_out(path: Path, opts: argparse.Namespace, rounds: list[dict[str, Any]],
              cmp: dict[str, float] | None, *, quiet: bool = False) -> None:
    """Also called after every measurement (cmp None), so a crash keeps finished rounds."""
    config = {"num_prompts": opts.num_prompts, "idle_probes": opts.idle_probes,
              "kv_gib": opts.kv_gib, "repeat": opts.repeat,
              "seed": opts.seed, "policy": opts.policy, "input_len": INPUT_LEN,
              "output_len": OUTPUT_LEN,
              "max_num_seqs": MAX_NUM_SEQS, "max_model_len": MAX_MODEL_LEN,
              "omp_num_threads": os.environ["OMP_NUM_THREADS"], "cpu_count": os.cpu_count()}
    path.write_text(json.dumps({"config": config, "comparison": cmp,
                                "rounds": without_texts(rounds)}, indent=1, default=str))
    if not quiet:
        print(f"\nraw results: {path}", flush=True)


# -- main --------------------------------------------------------------------------------------
