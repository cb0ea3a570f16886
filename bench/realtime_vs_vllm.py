"""Fairway's realtime path against a bare vLLM OpenAI server: same model, engine, load, machine.

Run from the repository root (Postgres on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 must be
up, or FAIRWAY_TEST_PG_URL / FAIRWAY_TEST_REDIS_URL name others, as bench/gpu_check.sh does with
embedded ones; the vLLM engine must be installed):

    OMP_NUM_THREADS=2 .venv/bin/python bench/realtime_vs_vllm.py [--repeat N] [--out FILE]
        [--num-prompts 64] [--idle-probes 10] [--model DIR]

What it measures, in one run and one process tree:

(a) `python -m vllm.entrypoints.openai.api_server` with the model Fairway serves (float32 and
    eager on CPU, the model's dtype and CUDA graphs on a GPU, max_num_seqs 64, max_model_len
    2048, the same KV cache size: VLLM_CPU_KVCACHE_SPACE on CPU, --kv-cache-memory-bytes on a GPU);
(b) Fairway as separate processes (API, dispatcher, Celery worker hosting vLLM's AsyncLLM with
    the same settings) on a throwaway Postgres database and a leased, flushed Redis db. The
    dispatcher runs --policy priority by default: the "fairway" policy refuses (429) realtime
    jobs whose predicted TTFT misses the plan's SLO, which a burst on a small CPU can trigger,
    and bare vLLM refuses nothing, so only a non-shedding policy compares like with like.

Each gets one short warm-up request, then --idle-probes (10) sequential streaming requests on the
idle server (the fixed per-request TTFT cost, without queueing), then vLLM's own load generator
(`vllm.benchmarks.serve`): openai-chat backend, random dataset, 128 input / 64 output tokens
(ignore_eos), all prompts at once, same seed. The two systems never run at the same time; with
--repeat N the pair runs N times, the order alternating, and the table shows medians. On a
shared machine the figures move with everyone else's load: the per-round lines show how much
CPU other processes took during each load.

Two TTFTs are reported. vllm bench counts the first SSE chunk that has `choices`. vLLM's server
sends a role-only chunk just before the first token; Fairway puts the role on its first text
chunk. The "first content" TTFT (first chunk that carries text) measures the same event on
both: ttft + the first inter-chunk gap where the idle probe saw a role-only chunk first, ttft
itself where it did not (the probe records which). TPOT is recomputed from it. For Fairway
it also reads the jobs table and splits each request's first-content latency into API
ingest, dispatch, Celery delivery, engine (queue + prefill) and relay (worker -> Redis
Stream -> API -> SSE -> client), and it reports the CPU seconds each process used during the
load: on a small CPU box the service's own processes compete with the engine for the same
cores.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python bench/realtime_vs_vllm.py` without installing
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from redis import Redis  # noqa: E402

from bench.harness import (  # noqa: E402
    START_TIMEOUT_S,
    bare_vllm_server,
    bench_model,
    pct,
    raise_interrupt,
)
from bench.realtime_metrics import (  # noqa: E402
    dispatch_lag,
    fetch_jobs,
    job_segments,
    summarize,
)
from bench.realtime_report import (  # noqa: E402
    INPUT_LEN,
    MAX_NUM_SEQS,
    OUTPUT_LEN,
    PROBES,
    SEGMENTS,
    comparison,
    print_cpu,
    print_lag,
    print_probe,
    print_rounds,
    print_table,
    write_out,
)
from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from tests.support.services import (  # noqa: E402
    claim_redis_db,
    create_database,
    drop_database,
    redis_url,
    release_redis_db,
)
from tests.support.stack import Stack  # noqa: E402

SERVED = "SmolLM2-135M-Instruct"
MAX_MODEL_LEN = 2048
WORKER_ID = "bench-1"
PROBE_PROMPT = "Count from one to twenty in words, separated by commas."


# -- processes -------------------------------------------------------------------------------
def engine_env(kv_gib: int) -> dict[str, str]:
    """The environment both engines see: same KV cache size and OMP threads."""
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_gib)
    env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    return env


@contextlib.contextmanager
def vllm_server(model_dir: Path, kv_gib: int, log_dir: Path
                ) -> Iterator[tuple[str, dict[str, int]]]:
    with bare_vllm_server(model_dir, max_num_seqs=MAX_NUM_SEQS, kv_gib=kv_gib,
                          log=log_dir / "vllm-server.log") as (base, popen):
        yield base, {"vllm-server": popen.pid}


def fairway_env(kv_gib: int, model_dir: Path) -> dict[str, str]:
    return {"FAIRWAY_KV_CACHE_GIB": str(kv_gib), "FAIRWAY_MAX_NUM_SEQS": str(MAX_NUM_SEQS),
            "FAIRWAY_MAX_MODEL_LEN": str(MAX_MODEL_LEN), "FAIRWAY_SERVED_MODEL_NAME": SERVED,
            "FAIRWAY_MODEL_PATH": str(model_dir),
            "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}


@dataclass(frozen=True)
class Run:
    """What every measurement needs: options, model, scratch dir, and Fairway's backing stores."""

    opts: argparse.Namespace
    out: Path
    model_dir: Path
    work: Path
    db_url: str
    redis_url: str
    api_key: str


@contextlib.contextmanager
def fairway_stack(run: Run, log_dir: Path) -> Iterator[tuple[str, dict[str, int]]]:
    Redis.from_url(run.redis_url).flushdb()
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(run.db_url, run.redis_url, log_dir=log_dir,
                  env_overrides=fairway_env(run.opts.kv_gib, run.model_dir))
    try:
        stack.start_api()
        stack.start_dispatcher(policy=run.opts.policy)
        stack.start_worker(WORKER_ID, engine="vllm", timeout_s=START_TIMEOUT_S)
        yield stack.base_url, {name: p.popen.pid for name, p in stack.procs.items()}
    finally:
        stack.stop()
        Redis.from_url(run.redis_url).flushdb()


# -- load --------------------------------------------------------------------------------------
def warm_up(base_url: str, api_key: str | None) -> None:
    """One short chat request; also proves the key works and ignore_eos reaches the engine."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base_url + "/v1/chat/completions", json.dumps(body).encode(),
                                 headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            usage = json.load(resp)["usage"]
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"warm-up got HTTP {exc.code}: {exc.read()[:500]!r}") from exc
    if usage["completion_tokens"] != 8:
        raise RuntimeError(f"warm-up produced {usage} (ignore_eos not honoured?)")


@contextlib.contextmanager
def api_key_env(api_key: str | None) -> Iterator[None]:
    """vllm bench reads the bearer token from OPENAI_API_KEY."""
    saved = os.environ.pop("OPENAI_API_KEY", None)
    if api_key:
        os.environ["OPENAI_API_KEY"] = api_key
    try:
        yield
    finally:
        os.environ.pop("OPENAI_API_KEY", None)
        if saved is not None:
            os.environ["OPENAI_API_KEY"] = saved


def bench_argv(base_url: str, model_dir: Path, opts: argparse.Namespace, result_dir: Path,
               label: str) -> list[str]:
    return ["--backend", "openai-chat", "--base-url", base_url,
            "--endpoint", "/v1/chat/completions", "--model", str(model_dir),
            "--served-model-name", SERVED, "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
            "--num-prompts", str(opts.num_prompts), "--request-rate", "inf", "--ignore-eos",
            "--seed", str(opts.seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm", "--label", label,
            "--save-result", "--save-detailed", "--result-dir", str(result_dir),
            "--result-filename", f"{label}.json"]


def run_load(base_url: str, api_key: str | None, model_dir: Path, opts: argparse.Namespace,
             result_dir: Path, label: str, roots: Mapping[str, int]) -> dict[str, Any]:
    """vllm bench serve, in-process; returns its saved JSON, the wall-clock offset and the CPU
    seconds each server process (and the rest of the machine) used during the load."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(bench_argv(base_url, model_dir, opts, result_dir, label))
    wall_offset = time.time() - time.perf_counter()  # start_times are perf_counter values
    since = dt.datetime.now(dt.UTC)
    before = cpu_snapshot(roots)
    with api_key_env(api_key):
        serve.main(args)
    after = cpu_snapshot(roots)
    until = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = json.loads((result_dir / f"{label}.json").read_text())
    result.update(wall_offset=wall_offset, since=since.isoformat(), until=until.isoformat(),
                  cpu_s={k: round(after[k] - before.get(k, 0.0), 2) for k in after})
    return result


# -- idle probe ----------------------------------------------------------------------------------
def stream_first_content(base_url: str, api_key: str | None) -> tuple[float, float, bool]:
    """One streaming chat request; returns (wall time sent, seconds to the first text chunk,
    whether a role-only chunk came before it)."""
    url = urllib.parse.urlsplit(base_url)
    body = {"model": SERVED, "messages": [{"role": "user", "content": PROBE_PROMPT}],
            "max_tokens": 4, "ignore_eos": True, "stream": True}
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=120)
    try:
        sent, t0 = time.time(), time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"probe got HTTP {resp.status}: {resp.read()[:300]!r}")
        first = float("nan")
        chunks = 0
        role_first = False
        for line in resp:  # SSE lines; http.client undoes the chunked encoding
            data = line.strip().removeprefix(b"data: ")
            if first != first and data.startswith(b"{"):  # still NaN: no text yet
                choices = json.loads(data).get("choices") or [{}]
                chunks += 1
                if (choices[0].get("delta") or {}).get("content"):
                    first = time.perf_counter() - t0
                    role_first = chunks > 1
        return sent, first, role_first
    finally:
        conn.close()


def probe_idle(base_url: str, api_key: str | None, probes: int = PROBES) -> dict[str, Any]:
    """Sequential requests, nothing else running: TTFT without queueing behind a burst."""
    since = dt.datetime.now(dt.UTC)
    samples = []
    for _ in range(probes):
        samples.append(stream_first_content(base_url, api_key))
        time.sleep(0.2)
    ttfts = [f * 1000 for _, f, _ in samples]
    return {"since": since.isoformat(), "until": dt.datetime.now(dt.UTC).isoformat(),
            "samples": [(sent, f) for sent, f, _ in samples], "ttft_p50_ms": pct(ttfts, 50),
            "ttft_p99_ms": pct(ttfts, 99),
            "ttft_min_ms": min(ttfts), "ttft_max_ms": max(ttfts),
            "role_first": all(role for _, _, role in samples)}


def probe_lag(db_url: str, probe: dict[str, Any]) -> dict[str, float]:
    """The probe's jobs, matched to its requests by order (they ran one at a time)."""
    jobs = sorted(fetch_jobs(db_url, probe), key=lambda j: j["created_at"])
    rows = [job_segments(j, sent, sent + first)
            for j, (sent, first) in zip(jobs, probe["samples"], strict=False)]
    return {seg: pct([r[seg] * 1000 for r in rows], 50) for seg in SEGMENTS}


# -- CPU accounting (2 cores shared by engine, service and client) -----------------------------
def proc_label(root: str, top: psutil.Process, proc: psutil.Process) -> str:
    """The root process by its role; children by their title (vLLM names its processes,
    e.g. VLLM::EngineCore and the CPU model-runner worker)."""
    if proc.pid == top.pid:
        return root
    with contextlib.suppress(psutil.Error):
        return f"{root}/{proc.name()}"
    return f"{root}/child"


def cpu_snapshot(roots: Mapping[str, int]) -> dict[str, float]:
    """User+system CPU seconds per server process (and its children), this client process,
    and the whole machine (busy time of all cores)."""
    out: dict[str, float] = {}
    for root, pid in roots.items():
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(pid)
            for proc in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    label = proc_label(root, top, proc)
                    out[label] = out.get(label, 0.0) + t.user + t.system
    me = psutil.Process().cpu_times()
    out["bench-client"] = me.user + me.system
    total = psutil.cpu_times()
    out["machine-busy"] = total.user + total.system + total.nice + total.irq + total.softirq
    return out


# -- one round ---------------------------------------------------------------------------------
def measure_vllm(run: Run, n: int) -> dict[str, Any]:
    print(f"\n=== round {n}: bare vLLM server ===", flush=True)
    with vllm_server(run.model_dir, run.opts.kv_gib, run.work) as (base, roots):
        warm_up(base, None)
        probe = probe_idle(base, None, run.opts.idle_probes)
        raw = run_load(base, None, run.model_dir, run.opts, run.work, f"vllm-{n}", roots)
        raw["role_first"] = probe["role_first"]
    return {"summary": summarize(raw), "raw": raw, "probe": probe}


def first_traceback(log_dir: Path, max_chars: int = 3000) -> str | None:
    """The first traceback in the stack's logs (text or JSON lines), to explain failures."""
    for log in sorted(log_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        at = text.find("Traceback")
        if at < 0:
            continue
        start = text.rfind("\n", 0, at) + 1
        line = text[start:text.find("\n", at)]
        with contextlib.suppress(ValueError, AttributeError):
            line = json.loads(line).get("exc", line)  # JSON logs keep it in one field
        tail = line if line.startswith("Traceback") else text[start:start + max_chars]
        return f"{log.name}: ...\n{tail[-max_chars:]}"
    return None


def measure_fairway(run: Run, n: int) -> dict[str, Any]:
    print(f"\n=== round {n}: Fairway (api + scheduler --policy {run.opts.policy} + worker) ===",
          flush=True)
    log_dir = run.work / f"fairway-{n}"
    with fairway_stack(run, log_dir) as (base, roots):
        warm_up(base, run.api_key)
        probe = probe_idle(base, run.api_key, run.opts.idle_probes)
        raw = run_load(base, run.api_key, run.model_dir, run.opts, run.work, f"fairway-{n}",
                       roots)
        raw["role_first"] = probe["role_first"]
    probe["lag_p50_ms"] = probe_lag(run.db_url, probe)
    done = {"summary": summarize(raw), "raw": raw, "lag": dispatch_lag(run.db_url, raw),
            "probe": probe}
    if raw["failed"]:
        done["traceback"] = first_traceback(log_dir)
        print(f"{raw['failed']} Fairway request(s) failed; first traceback in the logs:\n"
              f"{done['traceback']}", flush=True)
    return done


def run_rounds(run: Run) -> list[dict[str, Any]]:
    rounds = []
    for n in range(1, run.opts.repeat + 1):
        vllm_first = n % 2 == 1  # alternate the order to cancel drift on a shared machine
        order = ["vllm", "fairway"] if vllm_first else ["fairway", "vllm"]
        done: dict[str, Any] = {"round": n, "order": order}
        rounds.append(done)
        for name in order:
            done[name] = measure_vllm(run, n) if name == "vllm" else measure_fairway(run, n)
            write_out(run.out, run.opts, rounds, None, quiet=True)
    return rounds


# -- report ------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--idle-probes", type=int, default=PROBES,
                   help="sequential streaming requests on each idle server")
    p.add_argument("--model", default=None,
                   help="HF model folder (default: $FAIRWAY_MODEL_PATH, else the packaged "
                        "SmolLM2-135M-Instruct)")
    p.add_argument("--kv-gib", type=int, default=2, help="KV cache GiB for both engines")
    p.add_argument("--repeat", type=int, default=1, help="run the pair N times; report medians")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="raw results JSON (default: temp)")
    p.add_argument("--policy", default="priority", choices=["priority", "fcfs", "fairway"],
                   help="Fairway dispatcher policy (default priority: it never refuses work; "
                        "'fairway' sheds realtime jobs whose predicted TTFT misses the plan's SLO "
                        "with 429, which bare vLLM would queue)")
    p.add_argument("--redis-db", type=int, default=None,
                   help="Redis db number for Fairway (default: lease a free one the way the "
                        "test suite does)")
    return p.parse_args()


def main() -> int:
    opts = parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # clean up on kill as on Ctrl-C
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    model_dir = bench_model(opts.model)
    work = Path(tempfile.mkdtemp(prefix="fairway-rt-bench-"))
    out = opts.out or Path(tempfile.mkstemp(prefix="realtime_vs_vllm-", suffix=".json")[1])
    print(f"model {model_dir.name}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
          f"KV {opts.kv_gib} GiB, logs in {work}, results to {out}", flush=True)
    db_url = create_database("fairway_bench")
    redis: str | None = None
    ok = False
    try:
        redis = redis_url(opts.redis_db) if opts.redis_db is not None else claim_redis_db()
        settings = Settings(database_url=db_url, redis_url=redis)
        _, api_key = create_tenant_with_key(settings, "bench")
        print(f"Fairway on a fresh database and {redis}", flush=True)
        rounds = run_rounds(Run(opts, out, model_dir, work, db_url, redis, api_key))
        cmp = comparison(rounds)
        write_out(out, opts, rounds, cmp)
        print_table(rounds, cmp)
        print_rounds(rounds)
        print_probe(rounds)
        print_lag(rounds)
        print_cpu(rounds)
        ok = not any(r[s]["summary"]["failed"] for r in rounds for s in ("vllm", "fairway"))
    finally:
        drop_database(db_url)
        if redis is not None and opts.redis_db is None:
            release_redis_db(redis)  # flushes it too
        elif redis is not None:
            Redis.from_url(redis).flushdb()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nfailed, interrupted or requests failed; logs kept in {work}",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
