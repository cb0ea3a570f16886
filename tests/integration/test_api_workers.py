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
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from service.cli.embedded import free_port
from service.store.telemetry.multiproc import pids_with_files
from tests.support.admin import NO_LIMITS, Admin
from tests.support.services import (
    PATIENT_PLAN,
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack, wait_until

pytestmark = pytest.mark.integration
MODEL = "sim-model"
HEALTHZ = re.compile(r'^fairway_http_requests_total\{method="GET",route="/healthz",'
                     r'status="200"\} (\S+)$', re.M)


@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[Stack, Path]]:
    files = Path(tempfile.mkdtemp(prefix="fairway-api-mp-"))
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
           "FAIRWAY_LOG_LEVEL": "INFO"}
    database, redis = create_database("fairway_apiworkers"), claim_redis_db()
    stack = Stack(database, redis, env_overrides=env)
    try:
        # The directory is the API's alone: a dispatcher or worker given it would write its
        # own files there (and its gauges cannot drop labels in that mode).
        stack.port = free_port()
        stack.spawn("api", ["api", "--port", str(stack.port), "--workers", "2"],
                    PROMETHEUS_MULTIPROC_DIR=str(files))
        wait_until(lambda: _get(stack, "/healthz").status_code == 200, 60, "api", stack)
        stack.start_dispatcher()
        stack.start_worker("sim-1")
        yield stack, files
    finally:
        stack.stop()
        drop_database(database)
        release_redis_db(redis)
        shutil.rmtree(files, ignore_errors=True)


def _get(stack: Stack, path: str) -> httpx.Response:
    # A new connection each time: the kernel picks the worker that accepts it.
    with httpx.Client(base_url=stack.base_url, timeout=10) as client:
        try:
            return client.get(path)
        except httpx.TransportError:  # not listening yet
            return httpx.Response(503)


def _healthz_total(stack: Stack) -> float:
    match = HEALTHZ.search(_get(stack, "/metrics").text)
    return float(match.group(1)) if match else 0.0


def _spread(stack: Stack, files: Path, n: int) -> int:
    """Send at least ``n`` health checks, more until both live workers wrote metrics (the
    kernel may hand one worker a run of connections); returns how many were sent."""
    sent = 0
    while sent < n or (len(_live_writers(files)) < 2 and sent < n + 200):
        assert _get(stack, "/healthz").status_code == 200
        sent += 1
    return sent


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
    first = _spread(stack, files, 40)
    writers = _live_writers(files)
    assert len(writers) >= 2, sorted(os.listdir(files))
    # Every scrape, whichever worker answers, sees the same total: no worker's share lost.
    totals = {_healthz_total(stack) for _ in range(6)}
    assert totals == {before + first}, totals

    victim = min(writers)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: _get(stack, "/healthz").status_code == 200, 30, "the API", stack)
    sent = first + _spread(stack, files, 20)
    # The killed worker's counts stay in the total; the one wait_until's probes added count.
    after = _healthz_total(stack)
    assert after >= before + sent, (before, after)
    probes = after - before - sent
    assert {_healthz_total(stack) for _ in range(6)} == {before + sent + probes}
    # Its live gauges are gone (an in-flight count it held must not stay in the sum): swept at
    # a scrape once it is dead, reaped or not.
    def swept() -> bool:
        _get(stack, "/metrics")
        return not [f for f in os.listdir(files) if f.startswith("gauge_live")
                    and f.endswith(f"_{victim}.db")]
    wait_until(swept, 10, "the killed worker's live gauges swept", stack)


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
    # Unlimited, the minute's requests were not counted: the first one now may pass. Which
    # worker accepts a connection is the kernel's choice, and on a busy box one worker can
    # take a run of them: send until both have refused (refusals take milliseconds).
    answers: list[int] = []
    refusing: set[int] = set()
    while len(refusing) < 2 and len(answers) < 200:
        answers += [_chat(stack, key).status_code for _ in range(10)]
        after = _refusals_by_pid(files, name)
        refusing = {pid for pid, n in after.items() if n > before.get(pid, 0)}
    assert len(answers) - answers.count(429) <= 1, answers
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
