"""`fairway chaos --short` on private servers (its own Postgres and Redis, from wheels): every
fault injected in turn under mixed load, then the targets each row is held to (docs/chaos.md).
One pass (about three minutes) serves every test here."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli.chaos.report import Row, markdown
from service.cli.chaos.run import PassPlan, run_pass

PLAN = PassPlan.short()


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[Row]:
    data_dir: Path = tmp_path_factory.mktemp("chaos")
    rows = run_pass(PLAN, data_dir, say=print)
    print(markdown(rows, PLAN.targets, "fairway chaos --short"))
    return rows


def _where(rows: list[Row], kind: str) -> dict[str, list[str]]:
    return {r.fault: r.details.get(kind, []) for r in rows if getattr(r, kind)}


def test_every_fault_ran_under_load(rows: list[Row]) -> None:
    assert [r.fault for r in rows] == [f.name for f in PLAN.faults]
    for row in rows:
        assert row.accepted > PLAN.load.batch_lines, row  # the batch and realtime requests
        if row.worker_fault:
            assert row.token_stall_s is not None, f"{row.fault} hit no stream"


def test_nothing_accepted_is_lost(rows: list[Row]) -> None:
    assert _where(rows, "lost") == {}


def test_nothing_is_duplicated(rows: list[Row]) -> None:
    assert _where(rows, "duplicated") == {}


def test_no_answer_is_silently_truncated(rows: list[Row]) -> None:
    assert {r.fault: r.details.get("truncated") for r in rows if r.silent_truncations} == {}


def test_no_process_needs_a_manual_restart(rows: list[Row]) -> None:
    assert {r.fault: r.details.get("exits") for r in rows if r.manual_restarts} == {}


def test_service_recovers_within_10s_of_the_dependency_return(rows: list[Row]) -> None:
    held = [r for r in rows if r.recovery_held]
    assert {r.fault.split()[0] for r in held} == {"redis", "postgres", "kill", "freeze"}
    slow = {r.fault: r.recovery_s for r in held
            if r.recovery_s is None or r.recovery_s > PLAN.targets.recovery_s}
    assert slow == {}


def test_a_worker_fault_stalls_streams_less_than_the_limit(rows: list[Row]) -> None:
    slow = {r.fault: r.token_stall_s for r in rows if r.worker_fault
            and (r.token_stall_s or 0.0) > PLAN.targets.stall_s}
    assert slow == {}


def test_a_rolling_restart_restarts_everything_once_and_reports_ttft(rows: list[Row]) -> None:
    """Every process sent SIGTERM in turn, drained and started again (a non-zero exit would be
    a manual restart, asserted above); the streams' p99 TTFT before and during is reported."""
    roll = next(r for r in rows if r.fault == "rolling restart")
    assert sorted(roll.supervisor_restarts) == sorted(
        f"{name} x1" for name in ("worker-1", "worker-2", "api", "dispatcher-a", "dispatcher-b"))
    assert roll.ttft_p99_before_s is not None and roll.ttft_p99_during_s is not None
