"""`fairway chaos --hosts --short`: the stack as separate hosts (network namespaces), a worker
cut from Redis and the active dispatcher cut from Postgres under streaming load, and what each
row is held to (docs/chaos.md#many-hosts). Needs root, `ip netns` and iptables; skipped, with
the reason, where they are unavailable. One pass (about a minute) serves every test here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.cli.chaos.hosts import HOSTS, net_faults, run_hosts_pass
from service.cli.chaos.netns import Fabric, unavailable
from service.cli.chaos.report import Row, Targets, markdown

WHY = unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no network namespaces: {WHY}")


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[Row]:
    data_dir: Path = tmp_path_factory.mktemp("chaos-hosts")
    rows = run_hosts_pass(True, data_dir, [], say=print)
    print(markdown(rows, Targets(), "fairway chaos --hosts --short"))
    return rows


def test_every_fault_ran_under_load(rows: list[Row]) -> None:
    assert [r.fault for r in rows] == [f.name for f in net_faults(short=True)]
    for row in rows:
        assert row.accepted > 5, row


def test_nothing_lost_duplicated_or_truncated(rows: list[Row]) -> None:
    found = {r.fault: {k: r.details.get(k) for k in ("lost", "duplicated", "truncated")}
             for r in rows if r.lost or r.duplicated or r.silent_truncations}
    assert found == {}


def test_no_process_needs_a_hand(rows: list[Row]) -> None:
    assert {r.fault: r.details.get("exits") for r in rows if r.manual_restarts} == {}


def test_service_recovers(rows: list[Row]) -> None:
    # The worker's partition: the other worker serves at once. The leader's: its standby
    # leads once the server ends the cut-off leader's silent session (its leader timeout).
    slow = {r.fault: r.recovery_s for r in rows
            if r.recovery_s is None or r.recovery_s > Targets().recovery_s}
    assert slow == {}


def test_the_victims_come_back(rows: list[Row]) -> None:
    back = {r.fault: r.details["victim_back"][0] for r in rows}
    assert all(" not " not in line for line in back.values()), back


def test_nothing_is_left_behind(rows: list[Row]) -> None:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout
    assert Fabric(HOSTS).prefix + "-" not in names, names  # the namespaces this pass made
