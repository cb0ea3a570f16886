"""Redis or Postgres away for seconds: no process exits, no stream ends silently, every
endpoint answers 503 (never 500) meanwhile, and everything works again by itself after.

The stack runs on private servers (the embedded ones, from wheels), so that stopping them does
not touch the shared test servers."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.cli.bootstrap import create_tenant_with_key
from service.cli.embedded import EmbeddedServers
from service.store.migrate import upgrade
from service.store.settings import Settings
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"
OUTAGE_S = 5.0


@pytest.fixture(scope="module")
def private() -> Iterator[tuple[EmbeddedServers, Stack, str]]:
    servers = EmbeddedServers(Path(tempfile.mkdtemp(prefix="fairway-outage-")))
    servers.start(need_db=True, need_redis=True)
    upgrade(servers.database_url)
    stack = Stack(servers.database_url, servers.redis_url, env_overrides={
        "FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
        "FAIRWAY_LEASE_SECONDS": "5", "FAIRWAY_MAX_NUM_SEQS": "16"})
    try:
        stack.start_api()
        stack.start_dispatcher()
        stack.start_worker("ow-1")
        _, key = create_tenant_with_key(Settings(database_url=servers.database_url), "outages")
        yield servers, stack, key
    finally:
        stack.stop()
        servers.stop()


def _stream(stack: Stack, key: str, out: list[dict[str, object]]) -> None:
    """One streamed request; records how it ended: finished, error event, or silently."""
    result: dict[str, object] = {"finish": None, "error": None, "done": False, "text": ""}
    try:
        with httpx.stream("POST", stack.base_url + "/v1/chat/completions", timeout=90, json={
                "model": MODEL, "stream": True, "max_tokens": 200, "temperature": 0,
                "messages": [{"role": "user", "content": "tell me a long story"}]},
                headers={"authorization": f"Bearer {key}"}) as resp:
            result["status"] = resp.status_code
            if resp.status_code != 200:  # refused up front (e.g. 503 while Redis is down)
                result["error"] = json.loads(resp.read())["error"]
                out.append(result)
                return
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    result["done"] = True
                    continue
                event = json.loads(data)
                if "error" in event:
                    result["error"] = event["error"]
                elif event.get("choices"):
                    choice = event["choices"][0]
                    result["text"] = str(result["text"]) + (choice["delta"].get("content") or "")
                    result["finish"] = choice.get("finish_reason") or result["finish"]
    except httpx.HTTPError as exc:
        result["error"] = {"transport": repr(exc)}
    out.append(result)


def _outage_under_load(stack: Stack, key: str, stop, start) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    results: list[dict[str, object]] = []
    threads = [threading.Thread(target=_stream, args=(stack, key, results)) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop()
    during = httpx.get(stack.base_url + "/readyz", timeout=10)
    time.sleep(OUTAGE_S)
    start()
    for t in threads:
        t.join(120)
    assert during.status_code == 503, during.text
    return results


def _assert_recovered(stack: Stack, key: str, results: list[dict[str, object]]) -> None:
    assert len(results) == 6
    for r in results:  # every stream ends with its answer or says it did not
        finished = r["finish"] is not None and r["done"]
        assert finished or r["error"] is not None, r
    for name, proc in stack.procs.items():
        assert proc.popen.poll() is None, f"{name} exited:\n{proc.tail()}"
    wait_until(lambda: httpx.get(stack.base_url + "/readyz", timeout=5).status_code == 200,
               20, "ready again", stack)
    resp = httpx.post(stack.base_url + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"})
    assert resp.status_code == 200, resp.text


def test_redis_down_for_seconds(private: tuple[EmbeddedServers, Stack, str]) -> None:
    servers, stack, key = private
    results = _outage_under_load(stack, key, servers.stop_redis, servers.start_redis)
    _assert_recovered(stack, key, results)


def test_postgres_down_for_seconds(private: tuple[EmbeddedServers, Stack, str]) -> None:
    servers, stack, key = private
    probes: list[int] = []

    def stop() -> None:
        servers.stop_postgres()
        for path in ("/v1/batches", "/v1/files", "/v1/models"):
            probes.append(httpx.get(stack.base_url + path, timeout=10,
                                    headers={"authorization": f"Bearer {key}"}).status_code)

    results = _outage_under_load(stack, key, stop, servers.start_postgres)
    assert 500 not in probes, probes
    _assert_recovered(stack, key, results)


def test_readiness_needs_a_live_dispatcher(private: tuple[EmbeddedServers, Stack, str]) -> None:
    """/readyz said ready while no dispatcher was alive: now it names the missing leader."""
    _, stack, _ = private
    assert httpx.get(stack.base_url + "/readyz", timeout=10).status_code == 200
    stack.kill("scheduler")
    try:
        wait_until(lambda: httpx.get(stack.base_url + "/readyz", timeout=10).status_code == 503,
                   15, "not ready without a dispatcher", stack)
        body = httpx.get(stack.base_url + "/readyz", timeout=10).json()
        assert body["checks"]["dispatcher"] == "none"
        assert any("dispatcher" in reason for reason in body["reasons"])
    finally:
        stack.start_dispatcher()
    wait_until(lambda: httpx.get(stack.base_url + "/readyz", timeout=10).status_code == 200,
               20, "ready again", stack)
