"""`fairway api --workers 2`: two processes behind one port, against the real Postgres and Redis.

Each request below opens a connection of its own, so the kernel hands them to either worker;
the metrics directory says which processes wrote (one file set per pid). Whichever worker
answers a scrape, /metrics adds every worker's counters up: the requests sent are counted once,
none lost, also after a worker is killed (its counters stay; the supervisor starts another).
An admin change made through one worker binds the next request on the other (the policy
generation in Redis).
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from service.store.telemetry.multiproc import pids_with_files
from tests.support.admin import NO_LIMITS, Admin
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, own_stack, wait_until

pytestmark = pytest.mark.integration
MODEL = "sim-model"
HEALTHZ = re.compile(r'^fairway_http_requests_total\{method="GET",route="/healthz",'
                     r'status="200"\} (\S+)$', re.M)


@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[Stack, Path]]:
    files = Path(tempfile.mkdtemp(prefix="fairway-api-mp-"))
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
           "FAIRWAY_LOG_LEVEL": "INFO", "PROMETHEUS_MULTIPROC_DIR": str(files)}
    with own_stack("apiworkers", env, workers=("sim-1",), api_workers=2) as stack:
        yield stack, files


def _get(stack: Stack, path: str) -> httpx.Response:
    # A new connection each time: the kernel picks the worker that accepts it.
    with httpx.Client(base_url=stack.base_url, timeout=10) as client:
        return client.get(path)


def _healthz_total(stack: Stack) -> float:
    match = HEALTHZ.search(_get(stack, "/metrics").text)
    return float(match.group(1)) if match else 0.0


def _spread(stack: Stack, files: Path, n: int) -> None:
    """Send ``n`` health checks and make sure both workers wrote metrics."""
    for _ in range(n):
        assert _get(stack, "/healthz").status_code == 200
    wait_until(lambda: len(_live_writers(files)) >= 2 or bool(_get(stack, "/healthz")), 10,
               "a second worker", stack)


def _live_writers(files: Path) -> set[int]:
    alive = set()
    for pid in pids_with_files(str(files)):
        try:
            os.kill(pid, 0)
            alive.add(pid)
        except ProcessLookupError:
            pass
    return alive


def test_counters_add_up_across_workers_and_survive_a_killed_one(
        two_workers: tuple[Stack, Path]) -> None:
    stack, files = two_workers
    before = _healthz_total(stack)
    _spread(stack, files, 40)
    writers = _live_writers(files)
    assert len(writers) >= 2, sorted(os.listdir(files))
    # Every scrape, whichever worker answers, sees the same total: no worker's share lost.
    totals = {_healthz_total(stack) for _ in range(6)}
    assert totals == {before + 40}, totals

    victim = min(writers)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: _get(stack, "/healthz").status_code == 200, 30, "the API", stack)
    _spread(stack, files, 20)
    # The killed worker's counts stay in the total; the one wait_until's probes added count.
    after = _healthz_total(stack)
    assert after >= before + 60, (before, after)
    probes = after - before - 60
    assert {_healthz_total(stack) for _ in range(6)} == {before + 60 + probes}
    # Its live gauges are gone (an in-flight count it held must not stay in the sum).
    assert not [f for f in os.listdir(files) if f.startswith("gauge_live")
                and f.endswith(f"_{victim}.db")]


def test_gauges_merge_and_the_per_process_series_stay_out(
        two_workers: tuple[Stack, Path]) -> None:
    stack, _ = two_workers
    page = _get(stack, "/metrics").text
    # livemin across workers: one series, no pid label.
    assert re.search(r'^fairway_dependency_up\{dependency="\w+"\} ', page, re.M) or \
        "fairway_dependency_up" not in page
    assert 'pid="' not in page.split("fairway_api_requests_in_flight", 1)[-1].split("\n", 3)[0]
    assert "process_cpu_seconds_total" not in page  # per process: left out when merged


def _chat(stack: Stack, key: str) -> httpx.Response:
    with httpx.Client(base_url=stack.base_url, timeout=60) as client:
        return client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                           json={"model": MODEL, "max_tokens": 1,
                                 "messages": [{"role": "user", "content": "hi"}]})


def test_an_admin_change_through_one_worker_binds_on_the_other(
        two_workers: tuple[Stack, Path]) -> None:
    stack, files = two_workers
    admin = Admin(stack.base_url)
    name = f"mp-{uuid.uuid4().hex[:8]}"
    tenant_id, key = admin.create_tenant(name, plan=PATIENT_PLAN)
    admin.set_quotas(tenant_id, **NO_LIMITS)
    # Both workers admit (and cache the tenant's policy) before the change.
    for _ in range(8):
        assert _chat(stack, key).status_code == 200
    before = _refusals_by_pid(files, name)
    admin.set_quotas(tenant_id, requests_per_minute=1)
    # Unlimited, the minute's requests were not counted: the first one now may pass.
    answers = [_chat(stack, key).status_code for _ in range(20)]
    assert answers.count(429) >= 19, answers
    after = _refusals_by_pid(files, name)
    refusing = {pid for pid, n in after.items() if n > before.get(pid, 0)}
    assert len(refusing) >= 2, (before, after)  # both workers refused: the change bound on both


def _refusals_by_pid(files: Path, tenant: str) -> dict[int, float]:
    """Each worker's own count of the tenant's refusals (labelled by its name), from its
    counter file."""
    counts: dict[int, float] = {}
    for path in files.glob("counter_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        metrics = MultiProcessCollector._read_metrics([str(path)])  # type: ignore[no-untyped-call]
        for metric in metrics.values():
            for sample in metric.samples:
                if (sample.name == "fairway_admission_rejections_total"
                        and dict(sample.labels).get("tenant") == tenant):
                    counts[pid] = counts.get(pid, 0.0) + sample.value
    return counts
