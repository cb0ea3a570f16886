"""`fairway up` on the embedded default (private Postgres and Redis from wheels), driven as a
user drives it: one banner that explains itself, a real request through the openai SDK, the
README's bootstrap commands run verbatim with no environment variables, the CLI's errors as
one line each, then Ctrl-C stops everything; started again it keeps its demo key."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from service.cli.child_processes import is_running, proc_stat
from service.cli.embedded import free_port
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.stack import REPO

FAIRWAY = [sys.executable, "-m", "service.cli.main"]
MODEL = "sim-model"
BANNER_LINES = 8


def clean_env(home: Path) -> dict[str, str]:
    """The user's environment with no FAIRWAY_* or OPENAI_* variable, and a home of its own
    (so the default data directory, ~/.local/share/fairway, is this test's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAIRWAY_", "OPENAI_"))}
    env.update({"HOME": str(home), "PYTHONPATH": str(REPO)})
    return env


@dataclass
class Up:
    proc: subprocess.Popen[str]
    before: list[str]  # what it printed before the banner
    banner: list[str]
    home: Path

    def field(self, label: str) -> str:
        line = next(x for x in self.banner if x.strip().startswith(label))
        return line.strip()[len(label):].split()[0]

    @property
    def data(self) -> Path:
        return self.home / ".local/share/fairway"


def _read_banner(proc: subprocess.Popen[str], timeout_s: float) -> tuple[list[str], list[str]]:
    deadline = time.monotonic() + timeout_s
    before: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("fairway up exited:\n" + "".join(before[-40:]))
        if line.startswith("Fairway is up"):
            banner = [line] + [proc.stdout.readline() for _ in range(BANNER_LINES - 1)]
            return before, [b.rstrip("\n") for b in banner]
        before.append(line)
    raise AssertionError("no banner from fairway up:\n" + "".join(before[-40:]))


def start_up(home: Path, port: int) -> subprocess.Popen[str]:
    env = {**clean_env(home), "FAIRWAY_API_PORT": str(port),
           "FAIRWAY_SERVED_MODEL_NAME": MODEL}
    return subprocess.Popen([*FAIRWAY, "up", "--engine", "sim"], cwd=home, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@contextmanager
def fairway_up(home: Path, port: int) -> Iterator[Up]:
    proc = start_up(home, port)
    try:
        before, banner = _read_banner(proc, 120)
        yield Up(proc, before, banner, home)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        code = proc.wait(60)
        assert code == 0, code
        leftover = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True)
        assert leftover.stdout.strip() == "", "processes left running after Ctrl-C"


def fairway(home: Path, *args: str, cwd: Path | None = None,
            **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FAIRWAY, *args], env={**clean_env(home), **env}, cwd=cwd or home,
                          text=True, capture_output=True, timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def home() -> Iterator[Path]:
    """A home directory outside pytest's temp root: the embedded Postgres runs as its own
    user where the tests run as root, and must traverse every folder above its data, while
    each pytest session (other runs' too) resets its temp root to 0700."""
    path = Path(tempfile.mkdtemp(prefix="fairway-up-home-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_up_explains_itself_and_keeps_its_key(home: Path):
    port = free_port()
    with fairway_up(home, port) as up:
        base = up.field("API base URL")
        assert base == f"http://127.0.0.1:{port}/v1"
        key = up.field("API key")
        assert up.field("Dashboard") == f"http://127.0.0.1:{port}/admin/ui/"
        token = up.field("Admin token")
        assert "about a minute" not in "".join(up.before)  # the sim engine loads nothing
        assert "~/.local/share/fairway/logs/" in up.field("Logs")
        # The demo tenant's plan, and what its target means under queue admission.
        plan = next(x for x in up.banner if x.strip().startswith("Plan"))
        assert "standard (tenant demo): first token in 1 s is a goal" in plan
        resp = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30
                             ).chat.completions.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert resp.choices[0].message.content
        assert (up.data / "pgdata").is_dir()

        # The admin token: made for this data directory, owner-only, the one the API takes.
        token_file = up.data / "admin-token"
        assert token_file.read_text().strip() == token != DEV_ADMIN_TOKEN
        for private in (token_file, up.data / "demo-key", up.data / "stack.json"):
            assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
        root = f"http://127.0.0.1:{port}"
        assert httpx.get(root + "/admin/tenants", timeout=10,
                         headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(root + "/admin/tenants", timeout=10, headers={
            "Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}).status_code == 403

        # The children log to files, which `fairway logs` shows.
        for role in ("api", "scheduler", "worker"):
            assert (up.data / "logs" / f"{role}.log").stat().st_size > 0, role
        shown = fairway(home, "logs", "api", "--no-follow", "-n", "5")
        assert shown.returncode == 0 and "Uvicorn running" in shown.stdout, shown
        state = json.loads((up.data / "stack.json").read_text())
        assert state["api_url"] == root and state["admin_token"] == token
    assert not (up.data / "stack.json").exists()  # a stopped stack is not found

    with fairway_up(home, port) as again:
        assert again.field("API key") == key  # kept, not re-minted
        assert again.field("Admin token") == token
        audit = httpx.get(root + "/admin/audit", timeout=10,
                          headers={"Authorization": f"Bearer {token}"}).json()["data"]
        issued = [e for e in audit if e["action"] == "key.issue"]
        assert len(issued) == 1 and issued[0]["actor"] == "fairway-up", issued
        assert issued[0]["details"]["prefix"] == key[:11]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(int(entry.name))
        if fields is not None and int(fields[1]) == pid and is_running(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_killed_outright_then_started_again_leaves_nothing_running(home: Path):
    """`fairway up` killed by SIGKILL (the OOM killer, a `kill -9`): its children exit with it,
    and the next run takes over the embedded servers it left, so that once that run stops,
    nothing of either is left (`fairway_up` checks)."""
    port = free_port()
    first = start_up(home, port)
    try:
        _read_banner(first, 120)
        children = [pid for pid in _children(first.pid)  # the worker retitles itself
                    if b"redis-server" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(children) == 3, children  # the API, the scheduler, the worker
    finally:
        first.kill()
        first.wait(10)
        assert first.stdout is not None
        first.stdout.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(map(is_running, children)):
        time.sleep(0.1)
    left = [c for c in children if is_running(c)]
    assert not left, f"children of the killed run still running: {left}"
    with fairway_up(home, port) as again:
        resp = openai.OpenAI(base_url=again.field("API base URL"), api_key=again.field(
            "API key"), max_retries=0, timeout=30).chat.completions.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert resp.choices[0].message.content


def _readme_bootstrap() -> list[list[str]]:
    """The commands of the README's "Admin bootstrap" block, as a user would type them."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Admin bootstrap"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no bash block under Admin bootstrap"
    commands = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def test_readme_bootstrap_verbatim_then_the_cli_against_the_stack(home: Path, tmp_path: Path):
    port = free_port()
    commands = _readme_bootstrap()
    assert [c[:3] for c in commands] == [[".venv/bin/fairway", "tenant", "create"],
                                         [".venv/bin/fairway", "key", "create"]]
    with fairway_up(home, port) as up:
        keys = []
        for command in commands:
            done = fairway(home, *command[1:])  # .venv/bin/fairway: this interpreter's
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            found = re.findall(r"fw-[A-Za-z0-9_-]{20,}", done.stdout)
            assert len(found) == 1, done.stdout
            keys.append(found[0])
        # A CLI whose own FAIRWAY_SECRET_KEY differs still makes a key that works: the
        # server hashes it (the CLI used to write the hash itself, with its own secret).
        other = fairway(home, "key", "create", "acme", "--name", "elsewhere",
                        FAIRWAY_SECRET_KEY="not-the-servers")
        assert other.returncode == 0, other.stderr
        keys += re.findall(r"fw-[A-Za-z0-9_-]{20,}", other.stdout)
        for key in keys:  # hashed with the server's secret: they work
            client = openai.OpenAI(base_url=up.field("API base URL"), api_key=key,
                                   max_retries=0, timeout=30)
            assert [m.id for m in client.models.list().data] == [MODEL]
        audit = httpx.get(f"http://127.0.0.1:{port}/admin/audit", timeout=10, headers={
            "Authorization": f"Bearer {up.field('Admin token')}"}).json()["data"]
        by_cli = [e["action"] for e in audit if e["actor"] == "admin:cli"]
        assert sorted(by_cli) == ["key.issue"] * 3 + ["tenant.create"], audit

        # The CLI's errors against a live stack: one line each, a non-zero exit.
        assert "exists" in one_line_error(fairway(home, *commands[0][1:]))
        assert "no tenant named" in one_line_error(fairway(home, "key", "create", "nobody"))
        assert "404" in one_line_error(fairway(home, "batch", "status", "batch_nope"))
        assert "401" in one_line_error(fairway(home, "batch", "list", "--api-key", "fw-bad"))
        lines = tmp_path / "in.jsonl"
        lines.write_text(json.dumps({"custom_id": "a", "method": "POST",
                                     "url": "/v1/chat/completions", "body": {
                                         "model": MODEL, "max_tokens": 3,
                                         "messages": [{"role": "user", "content": "hi"}]}}))
        demo = openai.OpenAI(base_url=up.field("API base URL"), api_key=up.field("API key"),
                             max_retries=0, timeout=30)
        files_before = len(demo.files.list().data)
        refused = one_line_error(fairway(home, "batch", "submit", str(lines), "--window", "1h"))
        assert "completion_window" in refused
        assert len(demo.files.list().data) == files_before  # nothing uploaded, nothing orphaned

        # batch wait without --output saves the results under a name it prints.
        work = tmp_path / "work"
        work.mkdir()
        submitted = fairway(home, "batch", "submit", str(lines), cwd=work)
        assert submitted.returncode == 0, submitted.stderr
        batch_id = re.search(r"batch (batch_\w+)", submitted.stdout).group(1)  # type: ignore[union-attr]
        waited = fairway(home, "batch", "wait", batch_id, cwd=work)
        assert waited.returncode == 0, waited.stderr
        saved = work / f"{batch_id}.output.jsonl"
        assert str(saved.name) in waited.stdout and saved.read_text().strip()
        listed = fairway(home, "batch", "list").stdout.splitlines()
        assert listed[0].split() == ["ID", "STATUS", "DONE", "FAILED", "CREATED", "ENDPOINT"]
        assert batch_id in listed[1] and "ago)" in listed[1]
        cancelled = one_line_error(fairway(home, "batch", "cancel", batch_id))
        assert "already ended" in cancelled
