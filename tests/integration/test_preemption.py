"""Realtime takes capacity back from batch across workers: preempt -> checkpoint -> resume on
another worker -> identical output; a crash during the resume loses nothing."""

from __future__ import annotations

import concurrent.futures as cf
import uuid
from typing import Any

import openai
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.stack import Stack, wait_until

MODEL = "sim-preempt"
# Two engine slots and slow steps, so two flex jobs fill a worker and run for a while.
WORKER_ENV = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": "2",
              "FAIRWAY_SIM_SPEED": "0.25"}
FLEX = {"model": MODEL, "max_tokens": 80, "temperature": 0, "service_tier": "flex",
        "extra_body": {"ignore_eos": True}}


def _job(database_url: str, public_id: str) -> Job:
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(Job.id == uuid.UUID(public_id.split("-", 1)[1])))
        assert job is not None
        return job


def _rows(database_url: str, **where: Any) -> list[Job]:
    with sync_session(database_url) as session:
        query = select(Job).where(Job.model == MODEL)
        for key, value in where.items():
            query = query.where(getattr(Job, key) == value)
        return list(session.scalars(query))


def _progressed(database_url: str, job_id: uuid.UUID, beyond: int) -> bool:
    with sync_session(database_url) as session:
        job = session.get(Job, job_id)
        return job.status == "running" and job.first_token_at is not None and (
            len(job.checkpoint_token_ids or []) >= beyond)


def test_preempt_checkpoint_resume_elsewhere_identical(sim_stack: Stack, make_tenant,
                                                        database_url):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=120)
    prompts = [f"batch story number {i}" for i in range(2)]
    sim_stack.start_worker("pre-a", **WORKER_ENV)
    with cf.ThreadPoolExecutor(4) as pool:
        batch = [pool.submit(api.chat.completions.create,
                             messages=[{"role": "user", "content": p}], **FLEX) for p in prompts]
        wait_until(lambda: len(_rows(database_url, status="running")) == 2, 20,
                   "two flex jobs running")
        wait_until(lambda: all(j.first_token_at for j in _rows(database_url, status="running")),
                   20, "flex jobs producing tokens")
        # A long realtime request keeps pre-a busy, so the victim must resume elsewhere.
        realtime = pool.submit(api.chat.completions.create, model=MODEL, max_tokens=200,
                               temperature=0, extra_body={"ignore_eos": True},
                               messages=[{"role": "user", "content": "urgent"}])
        wait_until(lambda: any(j.preemptions > 0 for j in _rows(database_url)), 20,
                   "a batch victim parked")
        parked = [j for j in _rows(database_url) if j.preemptions > 0]
        assert len(parked) == 1, "exactly one batch victim is taken back"
        victim = parked[0]
        assert victim.kind == "batch" and len(victim.checkpoint_token_ids) > 0
        # Resume elsewhere: a new worker; then crash it mid-resume and resume again.
        sim_stack.start_worker("pre-b", **WORKER_ENV)
        wait_until(lambda: _progressed(database_url, victim.id, 1) and
                   _job(database_url, "x-" + victim.id.hex).worker_id == "pre-b", 30,
                   "victim resumed on pre-b")
        sim_stack.kill("worker-pre-b")
        sim_stack.start_worker("pre-c", **WORKER_ENV)
        results = [f.result(timeout=120) for f in batch]
        rt = realtime.result(timeout=120)
    assert _job(database_url, rt.id).worker_id == "pre-a"
    assert _job(database_url, rt.id).preemptions == 0  # realtime is never a victim
    sim_stack.kill("worker-pre-a")
    final = _job(database_url, "x-" + victim.id.hex)
    assert final.status == "succeeded" and final.worker_id in ("pre-a", "pre-c")
    assert final.attempt >= 3 and final.preemptions == 1
    assert final.completion_tokens == 80  # each output token counted once
    assert final.recomputed_tokens > 0 and final.parked_seconds > 0
    # Identical to an uninterrupted greedy run of the same request.
    sim_stack.start_worker("pre-d", **WORKER_ENV)
    victim_prompt = final.request["messages"][0]["content"]
    clean = api.chat.completions.create(messages=[{"role": "user", "content": victim_prompt}],
                                        **FLEX)
    sim_stack.kill("worker-pre-d")
    victim_result = next(r for r in results if r.id.endswith(victim.id.hex))
    assert victim_result.choices[0].message.content == clean.choices[0].message.content
    assert final.result["text"] == clean.choices[0].message.content
