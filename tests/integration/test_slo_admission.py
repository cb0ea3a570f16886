"""Overload at the door, by the plan's admission mode. A plan that sheds: a burst far past what
a small pool can start within the plan's TTFT target gets 429 + Retry-After for the excess,
before anything is stored, and every request that was accepted is served to its end. A plan
that queues: the same burst waits within the plan's queue wait budget, and only what would
wait past it is refused."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import func, select, text

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.keys import outlook_key
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"


@pytest.fixture(scope="module")
def small_pool() -> Iterator[Stack]:
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": "4",
           "FAIRWAY_HEARTBEAT_SECONDS": "0.5", "FAIRWAY_SIM_SPEED": "0.5"}
    with own_stack("sloadmit", env, workers=("slo-1",)) as stack:
        # The door judges by the dispatcher's outlook; until its first one, all is admitted.
        client = redis.Redis.from_url(stack.redis_url)
        wait_until(lambda: client.exists(outlook_key(MODEL)), 30, "the first outlook", stack)
        client.close()
        yield stack


def _stream(stack: Stack, key: str, out: list[dict[str, object]]) -> None:
    result: dict[str, object] = {"finished": False, "done": False, "error": None}
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", timeout=120, json={
            "model": MODEL, "stream": True, "max_tokens": 48, "temperature": 0,
            "messages": [{"role": "user", "content": "hello " * 30}]},
            headers={"authorization": f"Bearer {key}"}) as resp:
        result["status"] = resp.status_code
        if resp.status_code != 200:
            result["retry_after"] = resp.headers.get("retry-after")
            result["error"] = json.loads(resp.read())["error"]
        else:
            for line in resp.iter_lines():
                if line == "data: [DONE]":
                    result["done"] = True
                elif line.startswith("data: ") and '"error":' in line:
                    result["error"] = json.loads(line[6:])["error"]
                elif line.startswith("data: ") and '"finish_reason":"' in line.replace(" ", ""):
                    result["finished"] = True
    out.append(result)


def _plan(stack: Stack, mode: str, max_queue_wait_ms: int) -> str:
    """A copy of the premium plan (a 500 ms TTFT target) with this admission mode."""
    name = f"{mode}-{uuid.uuid4().hex[:6]}"
    with sync_session(stack.database_url) as session:
        session.execute(text(
            "INSERT INTO tiers (name, weight, allowed_service_tiers, ttft_slo_ms, tpot_slo_ms, "
            "quotas, admission_mode, max_queue_wait_ms) SELECT :name, weight, "
            "allowed_service_tiers, ttft_slo_ms, tpot_slo_ms, quotas, :mode, :wait "
            "FROM tiers WHERE name = 'premium'"),
            {"name": name, "mode": mode, "wait": max_queue_wait_ms})
        session.commit()
    return name


def _burst(stack: Stack, key: str, n: int) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    threads = [threading.Thread(target=_stream, args=(stack, key, results)) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return results


def test_a_burst_past_the_target_is_shed_and_the_rest_served(small_pool: Stack) -> None:
    settings = Settings(database_url=small_pool.database_url, redis_url=small_pool.redis_url)
    tenant_id, key = create_tenant_with_key(settings, f"burst-{uuid.uuid4().hex[:6]}",
                                            plan=_plan(small_pool, "shed", 30_000))
    results = _burst(small_pool, key, 40)
    refused = [r for r in results if r["status"] == 429]
    served = [r for r in results if r["status"] == 200]
    assert len(refused) + len(served) == 40, results
    assert refused, "nothing was shed"
    assert served, "nothing was admitted"
    for r in refused:
        assert r["error"]["code"] == "slo_unattainable"  # type: ignore[index]
        assert r["retry_after"] and int(str(r["retry_after"])) >= 1
    # Every accepted request ends explicitly: its answer, or (rarely, when its wait in the queue
    # grew past the target after all) the dispatcher's refusal as an error event.
    for r in served:
        assert r["done"] and (r["finished"] or r["error"]["code"] == "slo_unattainable"), r  # type: ignore[index]
    with sync_session(small_pool.database_url) as session:  # door refusals stored nothing
        statuses = dict(session.execute(select(Job.status, func.count()).where(
            Job.tenant_id == tenant_id).group_by(Job.status)).all())
    assert sum(statuses.values()) == len(served)
    assert statuses.get("succeeded", 0) == sum(bool(r["finished"]) for r in served)


def test_a_queueing_plan_serves_the_burst_its_budget_holds(small_pool: Stack) -> None:
    """The same 500 ms TTFT target, a plan that queues for up to 60 s: no refusal, and every
    request of the burst answered in full, however far past the target its first token."""
    settings = Settings(database_url=small_pool.database_url, redis_url=small_pool.redis_url)
    _, key = create_tenant_with_key(settings, f"queue-{uuid.uuid4().hex[:6]}",
                                    plan=_plan(small_pool, "queue", 60_000))
    results = _burst(small_pool, key, 20)
    assert [r["status"] for r in results] == [200] * 20, results
    assert all(r["done"] and r["finished"] for r in results), results


def test_a_queueing_plan_refuses_what_would_wait_past_its_budget(small_pool: Stack) -> None:
    settings = Settings(database_url=small_pool.database_url, redis_url=small_pool.redis_url)
    _, key = create_tenant_with_key(settings, f"tight-{uuid.uuid4().hex[:6]}",
                                    plan=_plan(small_pool, "queue", 200))
    results = _burst(small_pool, key, 40)
    refused = [r for r in results if r["status"] == 429]
    assert refused and len(refused) < 40, results
    for r in refused:
        error = r["error"]
        assert error["code"] == "slo_unattainable"  # type: ignore[index]
        assert "longest queue wait (0.2 s)" in error["message"]  # type: ignore[index]



def test_each_admitted_job_keeps_the_doors_prediction(small_pool: Stack) -> None:
    """The door's predicted TTFT is stored on every realtime job it admitted, express-placed
    or judged, so the prediction can be checked against the job's real first token; a busier
    pool is predicted slower."""
    settings = Settings(database_url=small_pool.database_url, redis_url=small_pool.redis_url)
    tenant_id, key = create_tenant_with_key(settings, f"pred-{uuid.uuid4().hex[:6]}",
                                            plan=_plan(small_pool, "queue", 60_000))
    results = _burst(small_pool, key, 16)
    assert [r["status"] for r in results] == [200] * 16, results
    with sync_session(small_pool.database_url) as session:
        rows = session.execute(select(Job.predicted_ttft_ms, Job.first_token_at, Job.created_at)
                               .where(Job.tenant_id == tenant_id)).all()
    assert len(rows) == 16
    predicted = sorted(r.predicted_ttft_ms for r in rows)
    assert all(p is not None and p >= 0 for p in predicted), predicted
    assert predicted[-1] > predicted[0]  # 16 on 4 slots: the last ones wait behind the first
