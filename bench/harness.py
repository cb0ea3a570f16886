"""Process and statistics helpers shared by the end-to-end benches (bare vLLM vs Fairway)."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from service.cli.embedded import free_port
from service.cli.replay.vllm_baseline import stop_group

SERVED = "SmolLM2-135M-Instruct"
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = 900.0


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def log_tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def wait_http(url: str, popen: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"server exited with {popen.returncode}:\n{log_tail(log)}")
        if http_ok(url):
            return
        time.sleep(0.5)
    raise TimeoutError(f"server not ready after {timeout_s:.0f}s:\n{log_tail(log)}")


@contextlib.contextmanager
def bare_vllm_server(model_dir: Path, *, max_num_seqs: int, kv_gib: int, log: Path,
                     extra_args: tuple[str, ...] = ()
                     ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """vLLM's own OpenAI server with Fairway's engine settings; yields (base URL, process).

    As `worker.engine.vllm_engine` does: float32 and eager on CPU (no bf16 there), the model's
    own dtype and CUDA graphs on a GPU, and a KV cache of exactly `kv_gib` (on a GPU by bytes,
    not by memory share)."""
    port = free_port()
    cpu = on_cpu()
    kv = () if cpu else ("--kv-cache-memory-bytes", str(int(kv_gib * 2**30)))
    eager = ("--enforce-eager",) if cpu else ()  # CUDA graphs on a GPU, as the worker's engine
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", SERVED, "--dtype", "float32" if cpu else "auto",
           *eager, *kv,
           "--max-num-seqs", str(max_num_seqs), "--max-model-len", str(MAX_MODEL_LEN),
           *extra_args, "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_gib)}
    with open(log, "ab") as out:
        popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/health", popen, log, START_TIMEOUT_S)
        yield base, popen
    finally:
        stop_group(popen)


def on_cpu() -> bool:
    """Whether the installed vLLM runs on the CPU (vllm-cpu) rather than a GPU."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def bench_model(path: str | Path | None = None) -> Path:
    """The model a bench runs: `path`, else $FAIRWAY_MODEL_PATH (any HF model folder, as the
    worker reads it), else the packaged default (SmolLM2-135M-Instruct, converted once)."""
    chosen = path or os.environ.get("FAIRWAY_MODEL_PATH")
    if chosen:
        folder = Path(chosen)
        if not (folder / "config.json").is_file():
            raise SystemExit(f"{folder} is not an HF model folder (no config.json)")
        return folder
    from worker.model_prep import ensure_default_model

    return ensure_default_model()


def pct(values: list[float], q: float) -> float:
    """Percentile that skips NaNs; NaN when nothing is left."""
    vals = [v for v in values if v == v]
    return float(np.percentile(vals, q)) if vals else math.nan


def raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def express_line(database_url: str) -> str:
    """How many realtime jobs the API placed at insert with an express ticket (their
    ``assigned_at`` is their ``created_at``: one statement's clock) and how many the dispatcher
    claimed, over the whole run."""
    import psycopg

    from service.store.settings import to_libpq_url

    with psycopg.connect(to_libpq_url(database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE assigned_at = created_at), "
            "count(*) FILTER (WHERE assigned_at <> created_at) FROM jobs "
            "WHERE kind = 'realtime'").fetchone()
    express, claimed = row if row is not None else (0, 0)
    total = express + claimed
    share = f" ({express / total:.0%})" if total else ""
    return (f"realtime jobs placed at insert (express): {express} of {total}{share}; "
            f"claimed by the dispatcher: {claimed}")
