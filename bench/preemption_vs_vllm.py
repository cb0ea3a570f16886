"""Realtime under a batch flood: bare vLLM (FCFS, priority alone) against Fairway, side by side.

Run from the repository root (Postgres on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 must be
up, as for the test suite, or FAIRWAY_TEST_PG_URL / FAIRWAY_TEST_REDIS_URL name others; the
vLLM engine must be installed):

    OMP_NUM_THREADS=2 .venv/bin/python bench/preemption_vs_vllm.py \\
        [--batch 12] [--realtime 6] [--batch-tokens 192] [--out FILE]

Not a test: nothing is asserted, it prints a table. Three setups, one after the other, never two
engines at once, all with the model Fairway serves (worker.model_prep.ensure_default_model())
and the same engine settings (float32, eager on CPU and CUDA graphs on a GPU, max_num_seqs 8,
KV cache 1 GiB, max_model_len 2048, OMP_NUM_THREADS from the environment, 2 by default):

(a) `python -m vllm.entrypoints.openai.api_server --scheduling-policy fcfs`; every request is
    equal, realtime queues behind batch;
(b) the same server with `--scheduling-policy priority`: realtime is sent with body field
    "priority": 0, batch with "priority": 3. A waiting request never preempts running ones
    (vllm-project/vllm#40004), so realtime waits for a batch request to end;
(c) Fairway as separate processes (API, scheduler with the default "fairway" policy, one
    Celery worker hosting vLLM's AsyncLLM with the preemptive scheduler) on a throwaway Postgres
    database and a leased Redis db. Batch is sent as service_tier="flex" (batch class,
    priority 2), realtime with the default tier (realtime class).

The workload, the same for each setup:

1. one warm-up request, then --idle-probes (3) sequential streaming realtime requests on the
   idle server: the realtime-alone TTFT;
2. the flood: --batch (12) streaming batch requests at once (greedy, ignore_eos,
   --batch-tokens 192 each, more than the engine's 8 slots);
3. once the first batch tokens stream, plus --settle (2 s), --realtime (6) streaming realtime
   requests (greedy, 16 tokens) as a Poisson stream (mean gap --rt-gap, 2 s, fixed seed).

TTFT is from send to the first SSE chunk that carries text (Fairway sends a role-only chunk as
soon as the job is accepted, so the first chunk alone would flatter it). Batch tokens/s is all
batch output tokens over the flood's wall time (first batch sent to last batch done).
Preemptions: bare vLLM's /metrics counter `vllm:num_preemptions_total`, before and after; for
Fairway, the worker's /metrics (`vllm:num_preemptions_total`: the engine's recompute
preemptions plus jobs parked; `fairway_job_preemptions_total{class="batch"}`: jobs parked with
a checkpoint for realtime, so the difference is what happened inside the engine) and the jobs
table (`preemptions`, `recomputed_tokens`, `parked_seconds`, `events`). Recomputed tokens are
what Fairway's resumes re-prefilled, net of prefix-cache hits; a preemption inside one engine
(recompute) re-prefills too, but no engine reports by how much, so that part is not in the
figure. The script also checks that every batch request finished with all its tokens, and
compares each setup's batch texts with those of (b) (greedy; informative only).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python bench/preemption_vs_vllm.py` without installing
    sys.path.insert(0, str(ROOT))


from bench.harness import (  # noqa: E402
    START_TIMEOUT_S,
    bare_vllm_server,
    bench_model,
    raise_interrupt,
)
from bench.preemption_metrics import Call, fairway_jobs, summarize  # noqa: E402
from bench.preemption_report import (  # noqa: E402
    MAX_NUM_SEQS,
    REALTIME_TOKENS,
    SETUPS,
    print_table,
)
from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from tests.support.services import (  # noqa: E402
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack  # noqa: E402

SERVED = "SmolLM2-135M-Instruct"
KV_GIB = 1
MAX_MODEL_LEN = 2048
WORKER_ID = "bench-vllm-1"
REQUEST_TIMEOUT_S = 1800.0
TOPICS = ["a lighthouse", "a desert city", "a clockmaker", "a river barge", "an orchard",
          "a night train", "a mountain pass", "a tide pool", "a glass factory", "a beekeeper"]
QUESTIONS = ["What is the capital of France?", "Name three primary colors.",
             "How many legs does a spider have?", "What is two plus two?",
             "Which planet is closest to the sun?", "What language is spoken in Brazil?"]


# -- one streaming request -------------------------------------------------------------------
def stream_chat(base_url: str, api_key: str | None, body: dict[str, Any], call: Call) -> None:
    """POST a streaming chat completion and fill `call` in; never raises."""
    url = urllib.parse.urlsplit(base_url)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port,
                                      timeout=REQUEST_TIMEOUT_S)
    try:
        call.sent = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        call.status = resp.status
        if resp.status != 200:
            call.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return
        for line in resp:  # SSE lines; http.client undoes the chunked encoding
            data = line.strip().removeprefix(b"data: ")
            if not data.startswith(b"{"):
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                call.error = json.dumps(chunk["error"])[:300]
                continue
            call.response_id = call.response_id or chunk.get("id")
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    if call.first != call.first:  # still NaN: the first text
                        call.first = time.perf_counter()
                    call.text += content
                call.finish_reason = choice.get("finish_reason") or call.finish_reason
            if chunk.get("usage"):
                call.completion_tokens = chunk["usage"].get("completion_tokens")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        call.error = f"{type(exc).__name__}: {exc}"
    finally:
        call.done = time.perf_counter()
        conn.close()


def in_thread(fn: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    return thread


# -- what each setup sends -------------------------------------------------------------------
def batch_body(setup: str, i: int, max_tokens: int) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    body: dict[str, Any] = {
        "model": SERVED, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True,
        "messages": [{"role": "user", "content": f"Write a long, detailed story (part {i}) "
                                                 f"about {topic}, chapter by chapter."}]}
    if setup == "b":
        body["priority"] = 3
    elif setup == "c":
        body["service_tier"] = "flex"
    return body


def realtime_body(setup: str, i: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": SERVED, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0, "max_tokens": REALTIME_TOKENS,
        "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]}
    if setup == "b":
        body["priority"] = 0
    return body  # (a): vLLM's FCFS server refuses a non-zero priority; (c): default tier


# -- processes -------------------------------------------------------------------------------
@dataclass
class Server:
    """A started setup: where to send requests, and where its engine counters are."""

    base_url: str
    api_key: str | None
    metrics_url: str
    stack: Stack | None = None


@contextlib.contextmanager
def vllm_server(model_dir: Path, policy: str, log_dir: Path) -> Iterator[Server]:
    with bare_vllm_server(model_dir, max_num_seqs=MAX_NUM_SEQS, kv_gib=KV_GIB,
                          log=log_dir / f"vllm-{policy}.log",
                          extra_args=("--scheduling-policy", policy)) as (base, _):
        yield Server(base, None, base + "/metrics")


def fairway_env(model_dir: Path, files_dir: Path, preemption_mode: str | None = None
                ) -> dict[str, str]:
    env = {"FAIRWAY_KV_CACHE_GIB": str(KV_GIB), "FAIRWAY_MAX_NUM_SEQS": str(MAX_NUM_SEQS),
           "FAIRWAY_MAX_MODEL_LEN": str(MAX_MODEL_LEN), "FAIRWAY_SERVED_MODEL_NAME": SERVED,
           "FAIRWAY_MODEL_PATH": str(model_dir), "FAIRWAY_FILES_DIR": str(files_dir),
           "VLLM_CPU_KVCACHE_SPACE": str(KV_GIB)}
    if preemption_mode:
        env["FAIRWAY_PREEMPTION_MODE"] = preemption_mode
    return env


@contextlib.contextmanager
def fairway_stack(model_dir: Path, policy: str, log_dir: Path,
                  preemption_mode: str | None = None) -> Iterator[Server]:
    """API + scheduler + one vLLM worker on a fresh database and Redis db, torn down after."""
    database = create_database("fairway_pvv")
    redis: str | None = None
    files = Path(tempfile.mkdtemp(prefix="fairway-pvv-files-"))
    stack: Stack | None = None
    try:
        redis = claim_redis_db()
        _, api_key = create_tenant_with_key(Settings(database_url=database, redis_url=redis),
                                            "bench")
        log_dir.mkdir(parents=True, exist_ok=True)
        stack = Stack(database, redis,
                      env_overrides=fairway_env(model_dir, files, preemption_mode),
                      log_dir=log_dir)
        stack.start_api()
        stack.start_dispatcher(policy=policy)
        stack.start_worker(WORKER_ID, engine="vllm", timeout_s=START_TIMEOUT_S)
        beat = stack.heartbeat(WORKER_ID) or {}
        metrics = f"http://127.0.0.1:{beat.get('metrics_port')}/metrics"
        yield Server(stack.base_url, api_key, metrics, stack)
    finally:
        if stack is not None:
            stack.stop()
        drop_database(database)
        if redis is not None:
            release_redis_db(redis)  # flushes it too
        shutil.rmtree(files, ignore_errors=True)


# -- counters --------------------------------------------------------------------------------
def scrape(url: str, name: str, **labels: str) -> float | None:
    """Sum of the samples called `name` (with these labels) on a Prometheus endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except (OSError, urllib.error.HTTPError):
        return None
    values = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
              if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return float(sum(values)) if values else None


def counters(server: Server) -> dict[str, float | None]:
    out = {"engine_preemptions": scrape(server.metrics_url, "vllm:num_preemptions_total")}
    if server.stack is not None:
        out["parked_batch"] = scrape(server.metrics_url, "fairway_job_preemptions_total",
                                     **{"class": "batch"})
    return out


# -- one setup -------------------------------------------------------------------------------
def run_workload(setup: str, server: Server, opts: argparse.Namespace) -> dict[str, Any]:
    key = server.api_key
    warm = Call("warm-up")
    stream_chat(server.base_url, key, realtime_body(setup, 0), warm)
    if not warm.ok:
        raise RuntimeError(f"warm-up failed: {warm.error}")
    idle = []
    for i in range(opts.idle_probes):
        idle.append(Call(f"idle-{i}"))
        stream_chat(server.base_url, key, realtime_body(setup, i), idle[-1])
        time.sleep(0.3)
    before = counters(server)

    batch = [Call(f"batch-{i}") for i in range(opts.batch)]
    threads = [in_thread(stream_chat, server.base_url, key,
                         batch_body(setup, i, opts.batch_tokens), c) for i, c in enumerate(batch)]
    deadline = time.monotonic() + START_TIMEOUT_S
    while all(c.first != c.first for c in batch):  # no batch text yet
        if time.monotonic() > deadline or all(not t.is_alive() for t in threads):
            raise RuntimeError(f"the batch flood never started: {[c.error for c in batch]}")
        time.sleep(0.05)
    time.sleep(opts.settle)
    streaming_at_rt = sum(1 for c in batch if c.first == c.first and c.done != c.done)

    rng = random.Random(opts.seed)
    realtime = [Call(f"realtime-{i}") for i in range(opts.realtime)]
    rt_threads = []
    for i, c in enumerate(realtime):
        if i:
            time.sleep(rng.expovariate(1.0 / opts.rt_gap))
        rt_threads.append(in_thread(stream_chat, server.base_url, key,
                                    realtime_body(setup, i), c))
    for t in threads + rt_threads:
        t.join(REQUEST_TIMEOUT_S)
    time.sleep(3.0 if server.stack is not None else 0.5)  # the worker's counters follow heartbeats
    after = counters(server)
    jobs = fairway_jobs(server.stack.database_url) if server.stack is not None else None
    return summarize(setup, opts, idle, batch, realtime, before, after, jobs, streaming_at_rt)


def measure(setup: str, model_dir: Path, work: Path, opts: argparse.Namespace) -> dict[str, Any]:
    print(f"\n=== ({setup}) {SETUPS[setup]} ===", flush=True)
    started = time.monotonic()
    server_cm = (fairway_stack(model_dir, opts.policy, work / "fairway", opts.preemption_mode)
                 if setup == "c" else
                 vllm_server(model_dir, "fcfs" if setup == "a" else "priority", work))
    with server_cm as server:
        print(f"  up after {time.monotonic() - started:.0f} s", flush=True)
        result = run_workload(setup, server, opts)
    print(f"  idle TTFT p50 {result['idle_ttft_p50_ms']:.0f} ms, flood TTFT p50 "
          f"{result['busy_ttft_p50_ms']:.0f} ms / max {result['busy_ttft_max_ms']:.0f} ms, "
          f"batch {result['batch_tok_s']:.1f} tok/s, "
          f"{result['batch_finished']}/{opts.batch} batch finished", flush=True)
    return result


# -- report ----------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=12, help="batch requests in the flood")
    p.add_argument("--realtime", type=int, default=6, help="realtime requests during the flood")
    p.add_argument("--batch-tokens", type=int, default=192, help="max_tokens of each batch job")
    p.add_argument("--idle-probes", type=int, default=3, help="realtime requests before it")
    p.add_argument("--rt-gap", type=float, default=2.0, help="mean realtime gap, seconds")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds after the first batch tokens before realtime starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--setups", default="abc", help="which setups to run (default abc)")
    p.add_argument("--policy", default="fairway", help="Fairway scheduler policy")
    p.add_argument("--preemption-mode", choices=["recompute", "swap"], default=None,
                   help="Fairway worker's FAIRWAY_PREEMPTION_MODE (default: the setting's "
                        "default; swap keeps a parked job's KV in CPU memory on GPU builds)")
    p.add_argument("--model", default=None,
                   help="HF model folder (default: $FAIRWAY_MODEL_PATH, else the packaged "
                        "SmolLM2-135M-Instruct)")
    p.add_argument("--out", type=Path, default=None, help="raw results JSON")
    return p.parse_args()


def main() -> int:
    opts = parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # clean up on kill as on Ctrl-C
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    model_dir = bench_model(opts.model)
    work = Path(tempfile.mkdtemp(prefix="fairway-pvv-bench-"))
    print(f"model {model_dir.name}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
          f"KV {KV_GIB} GiB, max_num_seqs {MAX_NUM_SEQS}, logs in {work}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    ok = False
    try:
        for setup in opts.setups:
            results[setup] = measure(setup, model_dir, work, opts)
            if opts.out:
                opts.out.write_text(json.dumps({"config": vars(opts), "results": results},
                                               indent=1, default=str))
        print_table(results, opts)
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nfailed or interrupted; logs kept in {work}", file=sys.stderr)
    if opts.out:
        print(f"\nraw results: {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
