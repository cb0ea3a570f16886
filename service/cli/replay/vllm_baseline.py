"""A bare vLLM OpenAI server with the engine settings a Fairway worker uses (same model,
float32, eager, max_num_seqs, max_model_len, KV cache), FCFS or ``--scheduling-policy
priority``: the baseline a replay compares Fairway with. Started as its own process group
and stopped with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from service.cli.embedded import free_port
from service.cli.errors import CLIError
from service.store.settings import EngineSettings

START_TIMEOUT_S = 900.0
POLICIES = ("fcfs", "priority")


def server_command(model_dir: Path, served_name: str, policy: str, port: int,
                   engine: EngineSettings) -> list[str]:
    if policy not in POLICIES:
        raise ValueError(f"unknown vLLM scheduling policy {policy!r}; known: {POLICIES}")
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
            str(model_dir), "--served-model-name", served_name, "--dtype", "float32",
            "--enforce-eager", "--max-num-seqs", str(engine.max_num_seqs),
            "--max-model-len", str(engine.max_model_len), "--scheduling-policy", policy,
            "--host", "127.0.0.1", "--port", str(port)]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def bare_vllm(model_dir: Path, served_name: str, policy: str, log: Path,
              engine: EngineSettings | None = None) -> Iterator[str]:
    """Yields the server's root URL once /health answers; stops the whole group after."""
    engine = engine or EngineSettings()
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(int(engine.kv_cache_gib) or 1)}
    with open(log, "ab") as out:
        popen = subprocess.Popen(server_command(model_dir, served_name, policy, port, engine),
                                 env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(base + "/health"):
            if popen.poll() is not None:
                raise CLIError(f"bare vLLM exited with {popen.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise CLIError(f"bare vLLM not ready after {START_TIMEOUT_S:.0f} s; see {log}")
            time.sleep(0.5)
        yield base
    finally:
        stop_group(popen)


def stop_group(popen: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started, then SIGKILL it if it lingers."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(30)
