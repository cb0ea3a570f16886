"""`fairway up` on the embedded default: private Postgres and Redis from wheels, the whole
stack, a real request through the openai SDK, then Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from service.cli.embedded import free_port
from tests.support.stack import REPO


def _read_banner(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    buf: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("fairway up exited:\n" + "".join(buf[-40:]))
        buf.append(line)
        if line.strip() == "{":
            block = [line]
            while not block[-1].startswith("}"):
                block.append(proc.stdout.readline())
            return json.loads("".join(block))
    raise AssertionError("no banner from fairway up:\n" + "".join(buf[-40:]))


def test_up_serves_whole_stack_on_embedded_servers(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRWAY_")}
    port = free_port()
    env.update({"FAIRWAY_DATA_DIR": str(tmp_path / "data"), "FAIRWAY_API_PORT": str(port),
                "FAIRWAY_SERVED_MODEL_NAME": "sim-model", "PYTHONPATH": str(REPO)})
    proc = subprocess.Popen([sys.executable, "-m", "service.cli.main", "up", "--engine", "sim"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        banner = _read_banner(proc, 120)
        assert banner["base_url"] == f"http://127.0.0.1:{port}/v1"
        client = openai.OpenAI(base_url=banner["base_url"], api_key=banner["api_key"],
                               max_retries=0, timeout=30)
        resp = client.chat.completions.create(model="sim-model", max_tokens=5,
                                              messages=[{"role": "user", "content": "hi"}])
        assert resp.choices[0].message.content
        assert (tmp_path / "data" / "pgdata").is_dir()
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        code = proc.wait(60)
    assert code == 0
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "processes left running after Ctrl-C"
