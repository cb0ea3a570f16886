"""A dependency that hangs (stopped, wedged: it accepts connections and never answers) is not
one that is down (refused): nothing tells the API it is gone. Every call the API makes to it
has a deadline (FAIRWAY_DATABASE_TIMEOUT_SECONDS, FAIRWAY_REDIS_TIMEOUT_SECONDS), so requests
get a quick 503 with Retry-After instead of waiting, /readyz answers within its own budget,
and all is well again once the dependency answers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.hang_proxy import HangProxy
from tests.support.stack import Stack

DEADLINE_S = 2.0
MODEL = "sim-model"


@pytest.fixture(scope="module")
def hung_stack(database_url: str, test_redis_url: str
               ) -> Iterator[tuple[Stack, HangProxy, HangProxy]]:
    """An API alone (no dispatcher or worker: nothing here needs a job run), reaching Postgres
    and Redis through proxies that can hang."""
    pg, pg_url = HangProxy.before(database_url)
    redis, redis_url = HangProxy.before(test_redis_url)
    stack = Stack(pg_url, redis_url, env_overrides={
        "FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_KEY_CACHE_SECONDS": "0",
        "FAIRWAY_DATABASE_TIMEOUT_SECONDS": str(DEADLINE_S),
        "FAIRWAY_REDIS_TIMEOUT_SECONDS": str(DEADLINE_S)})
    try:
        stack.start_api()
        yield stack, pg, redis
    finally:
        stack.stop()
        pg.close()
        redis.close()


def _timed(method: str, url: str, **kw: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    resp = httpx.request(method, url, timeout=60, **kw)  # type: ignore[arg-type]
    return resp, time.monotonic() - started


def _chat(stack: Stack, key: str) -> tuple[httpx.Response, float]:
    return _timed("POST", stack.base_url + "/v1/chat/completions", json={
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"})


def _list_batches(stack: Stack, key: str) -> tuple[httpx.Response, float]:
    return _timed("GET", stack.base_url + "/v1/batches",
                  headers={"authorization": f"Bearer {key}"})


def _assert_quick_503(resp: httpx.Response, took: float) -> None:
    assert resp.status_code == 503, resp.text
    assert int(resp.headers["retry-after"]) >= 1
    assert resp.json()["error"]["type"] == "service_unavailable", resp.text
    assert took < DEADLINE_S + 1.5, took


def _wait_healthy(stack: Stack, key: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp, _ = _list_batches(stack, key)
        if resp.status_code == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"not answering again: {resp.status_code} {resp.text}")


@pytest.mark.parametrize("which", ["postgres", "redis"])
def test_a_hung_dependency_is_a_quick_503(hung_stack, make_tenant, which: str):
    stack, pg, redis = hung_stack
    proxy = pg if which == "postgres" else redis
    _, key = make_tenant()
    _wait_healthy(stack, key)
    proxy.hang()
    try:
        ready, took = _timed("GET", stack.base_url + "/readyz")
        assert ready.status_code == 503 and took < 1.5, (ready.text, took)
        assert ready.json()["checks"]["database" if which == "postgres" else "redis"] == "down"
        assert int(ready.headers["retry-after"]) >= 1
        for _ in range(2):  # the second finds the pool's connections as the first left them
            _assert_quick_503(*_chat(stack, key))
        if which == "postgres":
            _assert_quick_503(*_list_batches(stack, key))
    finally:
        proxy.resume()
    _wait_healthy(stack, key)
    ready, took = _timed("GET", stack.base_url + "/readyz")
    assert ready.json()["checks"]["database"] == "ok" and ready.json()["checks"]["redis"] == "ok"
