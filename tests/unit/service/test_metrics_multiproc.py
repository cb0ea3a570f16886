"""The API's multiprocess metrics directory (service.store.telemetry.multiproc): set up empty
for each start, and a dead worker's live gauges swept while its counters stay."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from service.store.telemetry import multiproc


def test_prepare_empties_the_directory_a_previous_run_left(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv(multiproc.ENV, str(tmp_path))  # (and unset again after the test)
    (tmp_path / "counter_1.db").write_bytes(b"old")
    assert multiproc.prepare_directory() == str(tmp_path)
    assert os.environ[multiproc.ENV] == str(tmp_path) and multiproc.active()
    assert list(tmp_path.iterdir()) == []


def test_a_dead_workers_live_gauges_go_and_its_counters_stay(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    for pid in (dead.pid, os.getpid()):
        for kind in ("counter", "histogram", "gauge_livesum", "gauge_livemin", "gauge_all"):
            (tmp_path / f"{kind}_{pid}.db").write_bytes(b"")
    assert multiproc.pids_with_files(str(tmp_path)) == {dead.pid, os.getpid()}
    assert multiproc.sweep_dead(str(tmp_path)) == [dead.pid]
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {f"{kind}_{pid}.db" for pid in (dead.pid, os.getpid())
                    for kind in ("counter", "histogram", "gauge_all")} | {
        f"gauge_livesum_{os.getpid()}.db", f"gauge_livemin_{os.getpid()}.db"}
    assert multiproc.sweep_dead(str(tmp_path)) == []  # swept once


def test_a_killed_worker_not_yet_reaped_is_swept(tmp_path: Path) -> None:
    # Its supervisor reaps it only at its next check; until then it is a zombie that still
    # answers signal 0, and its gauges must go all the same.
    child = subprocess.Popen(["sleep", "30"])
    try:
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, left unreaped
        os.kill(child.pid, 0)  # a zombie: still there for signal 0
        (tmp_path / f"gauge_livesum_{child.pid}.db").write_bytes(b"")
        assert multiproc.sweep_dead(str(tmp_path)) == [child.pid]
        assert list(tmp_path.iterdir()) == []
    finally:
        child.wait()
