"""Realtime placement by the engines' step clocks, on the real stack: realtime TTFT under a
batch flood with ``FAIRWAY_RT_EARLIEST_START`` on (the default) and off, side by side.

Four sim-engine workers (real processes, real Celery, Redis and Postgres; the sim engine
sleeps each step's cost-model time: 20 ms + 5.5 ms per decoding sequence, so a step full of
batch lasts ~60 ms) serve a batch flood submitted through the Batch API, while realtime
probes (streamed chat completions, Poisson) measure client-side TTFT to the first content
chunk. Realtime alone (no flood) is measured first in each stack. What this checks end to end:
workers publish step clocks, the dispatcher reads them and the policy places realtime on the
engine whose step in flight ends first, with real delivery delays (``FAIRWAY_DISPATCH_LEAD_S``)
and a shared, noisy 2-core machine. The simulator (bench/sched_rt_under_batch.py) measures
the same rule without that noise.

    python bench/rt_placement_stack.py [--probes 80] [--rate 2.0] [--rounds 1]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from bench.harness import pct  # noqa: E402
from tests.support.admin import Admin  # noqa: E402
from tests.support.stack import own_stack, wait_until  # noqa: E402

MODEL = "sim-model"
WORKERS = ("w1", "w2", "w3", "w4")
ENV = {
    "FAIRWAY_SERVED_MODEL_NAME": MODEL,
    "FAIRWAY_MAX_NUM_SEQS": "8",
    "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
    "FAIRWAY_LOG_LEVEL": "WARNING",
}


def probe_ttfts(client: openai.OpenAI, n: int, rate: float, seed: int) -> list[float]:
    """``n`` streamed realtime requests at Poisson ``rate``/s; TTFT of each (seconds)."""
    rng = random.Random(seed)
    out: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        t0 = time.perf_counter()
        try:
            stream = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"probe {i}: say hi"}],
                max_tokens=8, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    with lock:
                        out.append(time.perf_counter() - t0)
                    break
            else:  # the sim tokenizer can decode a few tokens to no text at all
                print(f"probe {i}: no text in its 8 tokens", file=sys.stderr)
            stream.close()
        except openai.APIError as exc:  # counted below as a missing probe, and said why
            print(f"probe {i} failed: {exc}", file=sys.stderr)

    threads = []
    for i in range(n):
        time.sleep(rng.expovariate(rate))
        t = threading.Thread(target=one, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    return out


def flood(client: openai.OpenAI, requests: int) -> str:
    lines = "".join(
        json.dumps({"custom_id": f"b{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": MODEL, "max_tokens": 48,
                             "messages": [{"role": "user", "content": f"batch item {i}"}]}})
        + "\n" for i in range(requests))
    uploaded = client.files.create(file=("flood.jsonl", io.BytesIO(lines.encode())),
                                   purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    return batch.id


def run_mode(timed: bool, args: argparse.Namespace) -> dict[str, float]:
    env = {**ENV, "FAIRWAY_RT_EARLIEST_START": "true" if timed else "false"}
    name = "rtplace_timed" if timed else "rtplace_blind"
    with own_stack(name, env, workers=WORKERS) as stack:
        _, key = Admin(stack.base_url).create_tenant(f"bench-{name}")
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                               timeout=120)
        alone = probe_ttfts(client, args.probes // 2, args.rate, seed=1)
        batch_id = flood(client, args.batch)
        wait_until(lambda: client.batches.retrieve(batch_id).request_counts.completed > 16,
                   120, "the flood to run", stack)
        done0, t0 = client.batches.retrieve(batch_id).request_counts.completed, time.time()
        busy = probe_ttfts(client, args.probes, args.rate, seed=2)
        done1, t1 = client.batches.retrieve(batch_id).request_counts.completed, time.time()
        client.batches.cancel(batch_id)
    return {
        "alone_p50": pct(alone, 50), "alone_p99": pct(alone, 99),
        "flood_p50": pct(busy, 50), "flood_p99": pct(busy, 99),
        "batch_per_s": (done1 - done0) / max(1e-9, t1 - t0), "n": float(len(busy)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=80, help="realtime probes under flood")
    parser.add_argument("--rate", type=float, default=2.0, help="realtime probes per second")
    parser.add_argument("--batch", type=int, default=1200, help="batch requests in the flood")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds per mode")
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for timed in (True, False):
            results[timed].append(run_mode(timed, args))
            r = results[timed][-1]
            print(f"{'timed' if timed else 'blind'}: alone p50 {1000 * r['alone_p50']:.0f} ms"
                  f" p99 {1000 * r['alone_p99']:.0f} | flood p50 {1000 * r['flood_p50']:.0f} ms"
                  f" p99 {1000 * r['flood_p99']:.0f} ms ({r['n']:.0f} probes) | batch"
                  f" {r['batch_per_s']:.1f} req/s", flush=True)
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for t, rs in results.items()}
    on, off = med[True], med[False]
    print(f"\nmedians over {args.rounds} round(s): earliest start on / off")
    for k, label in (("flood_p50", "flood TTFT p50"), ("flood_p99", "flood TTFT p99"),
                     ("alone_p50", "alone TTFT p50"), ("batch_per_s", "batch req/s")):
        print(f"  {label:<15} {on[k]:8.3f} / {off[k]:8.3f} = {on[k] / off[k]:.2f}x")
    print(f"  flood/alone p99: on {on['flood_p99'] / on['alone_p99']:.2f}x,"
          f" off {off['flood_p99'] / off['alone_p99']:.2f}x")


if __name__ == "__main__":
    main()
