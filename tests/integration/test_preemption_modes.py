"""FAIRWAY_PREEMPTION_MODE=swap on the sim engine, which cannot offload KV: the preemption
falls back to recompute and the job's events say so; the resume is recorded too, and GET
/v1/jobs/{id} shows both with the preemption record."""

from __future__ import annotations

import concurrent.futures as cf

import httpx
import openai
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.integration.test_preemption import _job
from tests.support.stack import Stack, wait_until

MODEL = "sim-preempt-modes"
# One engine slot: the flex job fills the worker and the realtime request takes it back.
WORKER_ENV = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": "1",
              "FAIRWAY_SIM_SPEED": "0.25", "FAIRWAY_PREEMPTION_MODE": "swap"}


def _flex_producing(database_url: str) -> bool:
    with sync_session(database_url) as session:
        return session.scalar(select(Job.id).where(
            Job.model == MODEL, Job.kind == "batch", Job.status == "running",
            Job.first_token_at.is_not(None))) is not None


def test_swap_falls_back_to_recompute_and_says_so(sim_stack: Stack, make_tenant, database_url):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=120)
    sim_stack.start_worker("modes-a", **WORKER_ENV)
    try:
        with cf.ThreadPoolExecutor(2) as pool:
            flex = pool.submit(api.chat.completions.create, model=MODEL, max_tokens=40,
                               temperature=0, service_tier="flex",
                               extra_body={"ignore_eos": True},
                               messages=[{"role": "user", "content": "a flex victim"}])
            wait_until(lambda: _flex_producing(database_url), 30, "the flex job producing")
            realtime = pool.submit(api.chat.completions.create, model=MODEL, max_tokens=5,
                                   temperature=0, messages=[{"role": "user", "content": "now"}])
            victim_resp = flex.result(timeout=120)
            realtime.result(timeout=120)
    finally:
        sim_stack.kill("worker-modes-a")

    victim = _job(database_url, victim_resp.id)
    assert victim.status == "succeeded" and victim.preemptions == 1
    assert victim.completion_tokens == 40
    events = victim.events or []
    assert [e["type"] for e in events] == ["preempted", "resumed"], events
    preempted, resumed = events
    assert preempted["mode"] == "recompute" and preempted["requested_mode"] == "swap"
    assert "SimEngine" in preempted["fallback_reason"] and preempted["kv"] == "dropped"
    assert preempted["worker"] == "modes-a" and preempted["checkpoint_tokens"] > 0
    assert resumed["worker"] == "modes-a" and resumed["after"] == "preemption"
    assert resumed["checkpoint_tokens"] == preempted["checkpoint_tokens"]
    assert resumed["recomputed_tokens"] == resumed["prefill_tokens"] - resumed["cached_tokens"]
    assert victim.recomputed_tokens == resumed["recomputed_tokens"]

    view = httpx.get(f"{sim_stack.base_url}/v1/jobs/{victim_resp.id}",
                     headers={"Authorization": f"Bearer {key}"}).json()
    assert [e["type"] for e in view["events"]] == ["preempted", "resumed"]
    assert view["preemption"]["preemptions"] == 1
    assert view["preemption"]["recomputed_tokens"] == victim.recomputed_tokens
    assert view["preemption"]["parked_seconds"] > 0
