"""What `fairway up` keeps in its data directory: secrets readable by the owner only, one admin
token per data directory (a configured FAIRWAY_ADMIN_TOKEN wins), a running stack found only
while its supervisor lives."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli.stack import admin_token_for, banner
from service.cli.state import (
    StackState,
    data_dir_admin_token,
    forget_stack,
    running_stack,
    write_private,
)
from service.store.settings import DEV_ADMIN_TOKEN, EngineSettings, Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_files_are_owner_only_even_over_an_open_one(tmp_path: Path):
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o600


def test_one_admin_token_per_data_directory(tmp_path: Path):
    first = data_dir_admin_token(tmp_path / "a")
    assert first == data_dir_admin_token(tmp_path / "a")  # kept across restarts
    assert first != data_dir_admin_token(tmp_path / "b") and first != DEV_ADMIN_TOKEN
    assert _mode(tmp_path / "a" / "admin-token") == 0o600


def test_a_configured_admin_token_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FAIRWAY_ADMIN_TOKEN", raising=False)
    token, own = admin_token_for(Settings(data_dir=tmp_path))
    assert own and token == data_dir_admin_token(tmp_path)
    monkeypatch.setenv("FAIRWAY_ADMIN_TOKEN", "configured-token")
    assert admin_token_for(Settings(data_dir=tmp_path)) == ("configured-token", False)


def test_a_stack_is_found_only_while_its_supervisor_runs(tmp_path: Path):
    state = StackState(api_url="http://127.0.0.1:1", database_url="postgresql://x",
                       redis_url="redis://x", admin_token="t", pid=os.getpid())
    state.write(tmp_path)
    assert running_stack(tmp_path) == state
    assert _mode(tmp_path / "stack.json") == 0o600
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    StackState(**{**state.__dict__, "pid": int(gone.stdout)}).write(tmp_path)
    assert running_stack(tmp_path) is None  # left behind by a crash: not a running stack
    forget_stack(tmp_path)
    assert running_stack(tmp_path) is None


def test_the_banner_names_everything_a_first_run_needs(tmp_path: Path):
    settings = Settings(data_dir=tmp_path, engine=EngineSettings(kind="sim",
                                                                 served_model_name="m"))
    text = banner(settings, api_url="http://127.0.0.1:9", key="fw-k", admin_token="tok",
                  token_is_own=True, verbose=False)
    for part in ("http://127.0.0.1:9/v1", "fw-k", "http://127.0.0.1:9/admin/ui/", "tok",
                 str(tmp_path / "logs"), "simulated engine", "fairway logs"):
        assert part in text, part
    assert "minute" not in text
