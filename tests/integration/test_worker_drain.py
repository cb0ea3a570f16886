"""SIGTERM to a worker drains it: its heartbeat says so and nothing new is placed there, its
batch jobs park with their checkpoints at once and resume on another worker, a realtime stream
that ends within the grace finishes there, one that outlasts it resumes elsewhere without the
client seeing a break; then the worker exits 0. Nothing is lost or duplicated."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import time
import uuid
from typing import Any

import openai
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.stack import Stack, wait_until

MODEL = "sim-drain"
GRACE_S = 4.0
# Slow steps and room for everything on one worker, so jobs are mid-way when the drain begins.
WORKER_ENV = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": "8",
              "FAIRWAY_SIM_SPEED": "0.25", "FAIRWAY_WORKER_DRAIN_GRACE_SECONDS": str(GRACE_S)}
FLEX = {"model": MODEL, "max_tokens": 120, "temperature": 0, "service_tier": "flex",
        "extra_body": {"ignore_eos": True}}


def _rows(database_url: str) -> list[Job]:
    with sync_session(database_url) as session:
        return list(session.scalars(select(Job).where(Job.model == MODEL)))


def _job(database_url: str, public_id: str) -> Job:
    with sync_session(database_url) as session:
        job = session.get(Job, uuid.UUID(public_id.split("-", 1)[-1]))
        assert job is not None
        return job


def _stream(api: openai.OpenAI, max_tokens: int, prompt: str) -> tuple[str, str, str | None]:
    """(job id, text, finish reason) of one streamed realtime request."""
    text, finish, job_id = [], None, ""
    for chunk in api.chat.completions.create(
            model=MODEL, max_tokens=max_tokens, temperature=0, stream=True,
            extra_body={"ignore_eos": True}, messages=[{"role": "user", "content": prompt}]):
        job_id = chunk.id
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return job_id, "".join(text), finish


def test_sigterm_drains_a_worker(sim_stack: Stack, make_tenant: Any, database_url: str) -> None:
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=120)
    old = sim_stack.start_worker("drain-a", **WORKER_ENV)
    with cf.ThreadPoolExecutor(6) as pool:
        flex = [pool.submit(api.chat.completions.create,
                            messages=[{"role": "user", "content": f"flex {i}"}], **FLEX)
                for i in range(2)]
        short = pool.submit(_stream, api, 12, "short")
        long = pool.submit(_stream, api, 400, "long")
        wait_until(lambda: sum(1 for j in _rows(database_url)
                               if j.status == "running" and j.first_token_at) == 4, 30,
                   "four jobs producing tokens on drain-a", sim_stack)
        sim_stack.start_worker("drain-b", **WORKER_ENV)
        os.kill(old.popen.pid, signal.SIGTERM)
        sent = time.monotonic()
        wait_until(lambda: (sim_stack.heartbeat("drain-a") or {}).get("draining") is True, 2,
                   "drain-a's draining beat", sim_stack)
        # The dispatcher reads heartbeats every half second (and rewrites its express tickets
        # after its next pass): placed after that, a job goes to drain-b.
        time.sleep(1.0)
        late = pool.submit(api.chat.completions.create, model=MODEL, max_tokens=8,
                           messages=[{"role": "user", "content": "late"}])
        assert old.popen.wait(GRACE_S + 30) == 0
        drained_s = time.monotonic() - sent
        flex_answers = [f.result(timeout=120) for f in flex]
        short_id, short_text, short_finish = short.result(timeout=120)
        long_id, long_text, long_finish = long.result(timeout=120)
        late_answer = late.result(timeout=120)
    sim_stack.procs.pop("worker-drain-a")
    assert drained_s < GRACE_S + 10
    for answer in flex_answers:  # parked at once, resumed on drain-b from their tokens
        job = _job(database_url, answer.id)
        assert job.status == "succeeded" and job.kind == "batch"
        assert job.preemptions == 1 and job.worker_id == "drain-b"
        assert answer.choices[0].message.content == job.result["text"]
        assert any(e.get("type") == "resumed" and e.get("worker") == "drain-b"
                   for e in job.events or [])
    job = _job(database_url, short_id)  # finished within the grace, where it ran
    assert job.status == "succeeded" and job.preemptions == 0 and short_finish == "length"
    assert job.worker_id == "drain-a"
    assert short_text == job.result["text"]
    job = _job(database_url, long_id)  # outlasted the grace: resumed on drain-b, no break
    assert job.status == "succeeded" and job.preemptions == 1 and long_finish == "length"
    assert job.worker_id == "drain-b"
    assert long_text == job.result["text"]
    assert any(e.get("type") == "resumed" and e.get("worker") == "drain-b"
               for e in job.events or [])
    job = _job(database_url, late_answer.id)
    assert job.status == "succeeded" and job.worker_id == "drain-b" and job.attempt == 1
    assert all(j.status == "succeeded" for j in _rows(database_url))
