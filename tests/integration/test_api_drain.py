"""SIGTERM to an API process: `/readyz` answers 503 at once while it still serves, then it stops
accepting, the stream in flight finishes whole, and the process exits 0."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import openai

from service.cli.embedded import free_port
from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.stack import Stack, wait_until

DELAY_S = 1.5


def _readyz(base: str) -> int | None:
    """The status `/readyz` answers; None when nothing accepts the connection."""
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _stream(api: openai.OpenAI) -> tuple[str, str, str | None]:
    text, finish, job_id = [], None, ""
    for chunk in api.chat.completions.create(
            model="sim-model", max_tokens=300, temperature=0, stream=True,
            extra_body={"ignore_eos": True}, messages=[{"role": "user", "content": "drain"}]):
        job_id = chunk.id
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return job_id, "".join(text), finish


def test_sigterm_drains_an_api(sim_stack: Stack, make_tenant: Any, database_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = sim_stack.spawn("api-drain", ["api", "--port", str(port)],
                           FAIRWAY_API_DRAIN_DELAY_SECONDS=str(DELAY_S),
                           FAIRWAY_API_DRAIN_GRACE_SECONDS="60")
    wait_until(lambda: _readyz(base) == 200, 60, "api-drain ready", sim_stack)
    _, key = make_tenant()
    api = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
    with cf.ThreadPoolExecutor(2) as pool:
        stream = pool.submit(_stream, api)
        time.sleep(1.0)  # under way
        assert not stream.done()
        os.kill(proc.popen.pid, signal.SIGTERM)
        sent = time.monotonic()
        wait_until(lambda: _readyz(base) == 503, 1.0, "readiness false")
        # Still accepting until the delay is over: a request now is served.
        short = api.chat.completions.create(model="sim-model", max_tokens=4,
                                            messages=[{"role": "user", "content": "x"}])
        assert short.choices[0].message.content
        assert time.monotonic() - sent < DELAY_S
        wait_until(lambda: _readyz(base) is None, DELAY_S + 2, "no new connections")
        assert not stream.done()  # in flight when the API stopped accepting
        job_id, text, finish = stream.result(timeout=120)
    assert proc.popen.wait(30) == 0
    sim_stack.procs.pop("api-drain")
    assert finish == "length"
    with sync_session(database_url) as session:
        job = session.get(Job, uuid.UUID(job_id.split("-", 1)[-1]))
        assert job is not None and job.status == "succeeded"
        assert text == (job.result or {})["text"]



def test_a_draining_worker_does_not_make_its_model_ready(database_url: str,
                                                         test_redis_url: str) -> None:
    """/readyz counts the workers that take new work: one that drains does not."""
    from fastapi.testclient import TestClient
    from redis import Redis

    from service.api.app import create_app
    from service.store.keys import worker_key
    from service.store.settings import EngineSettings, Settings
    from service.store.settings_groups import ApiSettings

    model = f"model-draining-{uuid.uuid4().hex[:6]}"
    redis = Redis.from_url(test_redis_url)
    beat = {"worker_id": model, "models": [model], "max_slots": 4, "running": 0,
            "ts": time.time(), "draining": True}
    redis.set(worker_key(model), json.dumps(beat), ex=30)
    settings = Settings(database_url=database_url, redis_url=test_redis_url,
                        engine=EngineSettings(kind="sim", served_model_name=model),
                        api=ApiSettings(waiting_room_seconds=0))  # workers count for /readyz
    try:
        with TestClient(create_app(settings)) as client:
            resp = client.get("/readyz")
        assert resp.status_code == 503
        assert f"no live worker serves model '{model}'" in resp.json()["reasons"]
    finally:
        redis.delete(worker_key(model))
