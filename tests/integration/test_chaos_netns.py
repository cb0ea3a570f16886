"""`fairway chaos --hosts --short`: the stack as separate hosts (network namespaces, two API
replicas behind haproxy), and network faults under streaming and batch load: a worker cut from
Redis and one from Postgres, the active dispatcher cut from Postgres, an API replica cut off
mid-stream, 100 ms latency and 1% loss on a worker's link; what each row is held to
(docs/chaos.md#many-hosts). Needs root, `ip netns`, iptables and haproxy; skipped, with the
reason, where they are unavailable. One pass (two to three minutes) serves every test here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.cli.chaos.hosts import HOSTS, run_hosts_pass
from service.cli.chaos.netfaults import DELAY_MS, net_faults
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


def test_every_fault_carried_a_batch_that_completed(rows: list[Row]) -> None:
    # Its lines count as accepted; a line lost or written twice is in the lost and
    # duplicated counts below.
    batches = {r.fault: r.details["batch"][0] for r in rows}
    assert all(": completed, " in line for line in batches.values()), batches


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


def test_a_replica_cut_mid_stream_breaks_streams_whose_jobs_finish(rows: list[Row]) -> None:
    # Its streams are closed by the balancer (not left hanging); each job still finished and
    # its result, fetched by id through the other replica, begins with what was streamed
    # (a job that did not is counted as lost above).
    row = next(r for r in rows if "api replica" in r.fault)
    assert row.details.get("refetched"), row.details
    assert set(row.client_errors) <= {"transport RemoteProtocolError", "transport ReadError",
                                      "transport ConnectError"}, row.client_errors


def test_the_slow_and_the_lossy_link_were_in_the_path(rows: list[Row]) -> None:
    slow = next(r for r in rows if "latency" in r.fault).details["link"][0]
    before, during = (float(part.split(" ms")[0].rsplit(" ", 1)[-1])
                      for part in slow.split(", "))
    assert during >= DELAY_MS > before, slow
    lossy = next(r for r in rows if "loss" in r.fault).details["link"][0]
    dropped = int(lossy.split(" dropped ")[1].split()[0])
    assert dropped > 0, lossy


def test_the_victims_come_back(rows: list[Row]) -> None:
    back = {r.fault: r.details["victim_back"][0] for r in rows}
    assert all(" not " not in line for line in back.values()), back


def test_nothing_is_left_behind(rows: list[Row]) -> None:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout
    assert Fabric(HOSTS).prefix + "-" not in names, names  # the namespaces this pass made
