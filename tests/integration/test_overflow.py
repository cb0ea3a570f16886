"""A plan that overflows: a realtime request past its rate limits runs at batch priority
(service_tier "flex" in its answer, a batch-class job) instead of a 429, through the official
SDK unchanged; a plan that refuses answers 429 as before; the month's budget binds either way."""

from __future__ import annotations

import uuid

import openai
import pytest
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack

MODEL = "sim-model"


def _plan(admin: Admin, over_quota: str, **limits: object) -> str:
    name = f"ov{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/tiers/{name}", json={
        "weight": 1, "allowed_service_tiers": ["auto", "default", "flex"], "ttft_slo_ms": 60_000,
        "tpot_slo_ms": 60_000, "over_quota": over_quota,
        "quotas": {**NO_LIMITS, **limits}})
    return name


def _client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0)


def _chat(client: openai.OpenAI) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                          messages=[{"role": "user", "content": "over"}])


def test_past_its_rate_limit_an_overflowing_plan_runs_the_request_as_flex(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    plan = _plan(admin, "overflow", requests_per_minute=1)
    assert next(p for p in admin.ok("GET", "/admin/tiers")["data"]
                if p["name"] == plan)["over_quota"] == "overflow"
    tenant_id, key = admin.create_tenant(f"ov-{uuid.uuid4().hex[:6]}", plan)
    client = _client(sim_stack, key)
    first, second = _chat(client), _chat(client)
    assert first.service_tier == "default"
    assert second.service_tier == "flex" and second.choices[0].message.content
    with sync_session(sim_stack.database_url) as session:
        kinds = dict(session.execute(select(Job.id, Job.kind).where(
            Job.tenant_id == uuid.UUID(tenant_id))).all())
    assert sorted(kinds.values()) == ["batch", "realtime"]


def test_a_refusing_plan_answers_429_past_its_rate_limit(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    _, key = admin.create_tenant(f"rf-{uuid.uuid4().hex[:6]}",
                                 _plan(admin, "refuse", requests_per_minute=1))
    client = _client(sim_stack, key)
    _chat(client)
    with pytest.raises(openai.RateLimitError):
        _chat(client)


def test_the_month_binds_an_overflowing_plan_too(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    _, key = admin.create_tenant(f"mo-{uuid.uuid4().hex[:6]}",
                                 _plan(admin, "overflow", requests_per_minute=1,
                                       monthly_tokens=10))
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(_client(sim_stack, key))
    assert "month" in str(refused.value).lower()
