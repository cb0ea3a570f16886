"""Budgets in money on the shared sim stack: the alert webhook fires once per threshold per
month, whoever checks and however often, signed and delivered by the existing webhook
delivery; a hard stop refuses new requests with OpenAI's 429 insufficient_quota and lifts when
the budget is raised; an alert-only budget never refuses."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from typing import Any

import httpx
import openai
import pytest

from service.spend.budgets import check_budgets
from service.store.db import sync_session
from service.store.models.spend import ModelPrice
from service.store.settings import Settings
from tests.support.admin import Admin
from tests.support.spend import ended_job
from tests.support.stack import Stack, wait_until
from tests.support.webhook_receiver import Receiver

M = 1_000_000


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def priced_model(admin: Admin, per_mtok: str) -> str:
    model = f"budget-model-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", "/admin/prices", json={"model": model, "input_per_mtok": per_mtok,
                                           "output_per_mtok": per_mtok})
    return model


def check(settings: Settings, now: dt.datetime | None = None) -> int:
    with sync_session(settings.database_url) as session:
        return check_budgets(session, currency="USD", now=now)


def budget_events(receiver: Receiver) -> list[dict[str, Any]]:
    return [r.event for r in receiver.received if r.event["type"] == "budget.threshold_reached"]


def test_each_threshold_alerts_once_a_month(admin: Admin, sim_stack: Stack,
                                            settings: Settings) -> None:
    url = sim_stack.database_url
    tid, _ = admin.create_tenant(f"alerts-{uuid.uuid4().hex[:8]}")
    receiver = Receiver().start()
    try:
        hook = admin.ok("POST", f"/admin/tenants/{tid}/webhooks",
                        json={"url": receiver.url, "event_types": ["budget.threshold_reached"]})
        receiver.secrets.append(hook["secret"])
        model = priced_model(admin, "1")
        admin.ok("PUT", f"/admin/tenants/{tid}/budget",
                 json={"monthly_limit": "10", "thresholds": [50, 80, 100]})
        ended_job(url, tid, model, prompt_tokens=6 * M, completion_tokens=0)  # 6.00 of 10
        for _ in range(3):
            check(settings)  # the stack's dispatcher checks too, every 15 s
        wait_until(lambda: len(budget_events(receiver)) == 1, 30, "the 50% alert")
        first = budget_events(receiver)[0]["data"]
        assert first == {"tenant_id": tid, "month": dt.datetime.now(dt.UTC).strftime("%Y-%m"),
                         "threshold_pct": 50, "spend": "6.000000", "monthly_limit": "10.000000",
                         "currency": "USD", "hard_stop": False}
        ended_job(url, tid, model, prompt_tokens=0, completion_tokens=5 * M)  # 11.00
        check(settings)
        check(settings)
        wait_until(lambda: len(budget_events(receiver)) == 3, 30, "the 80% and 100% alerts")
        # A month earlier is another month: its own alerts.
        last_month = (dt.datetime.now(dt.UTC).replace(day=1) - dt.timedelta(days=1)).replace(
            hour=12)
        old_model = f"{model}-old"  # priced then (the API prices from now on only)
        with sync_session(url) as session:
            session.add(ModelPrice(model=old_model, input_per_mtok=1, output_per_mtok=1,
                                   batch_discount_pct=50, flex_discount_pct=50,
                                   created_by="pytest",
                                   effective_from=last_month - dt.timedelta(days=1)))
            session.commit()
        ended_job(url, tid, old_model, prompt_tokens=5 * M, completion_tokens=0,
                  finished_at=last_month)
        check(settings, now=last_month)
        check(settings, now=last_month)
        wait_until(lambda: len(budget_events(receiver)) == 4, 30, "last month's 50% alert")
        check(settings)
        budget = admin.ok("GET", f"/admin/tenants/{tid}/budget")
    finally:
        receiver.stop()
    events = budget_events(receiver)
    assert receiver.refused == 0  # every one signed with the endpoint's secret
    assert Counter((e["data"]["month"], e["data"]["threshold_pct"]) for e in events) == {
        (budget["month"], 50): 1, (budget["month"], 80): 1, (budget["month"], 100): 1,
        (last_month.strftime("%Y-%m"), 50): 1}
    assert [a["threshold_pct"] for a in budget["alerts"]] == [50, 80, 100]
    assert {a["event_id"] for a in budget["alerts"]} <= {e["id"] for e in events}
    assert budget["percent_used"] == "110.00" and budget["stopped"] is False  # alert only


def chat(stack: Stack, key: str) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "sim-model", "max_tokens": 2,
                            "messages": [{"role": "user", "content": "hi"}]})


def test_a_hard_stop_refuses_with_insufficient_quota_until_raised(admin: Admin,
                                                                  sim_stack: Stack) -> None:
    url = sim_stack.database_url
    tid, key = admin.create_tenant(f"stop-{uuid.uuid4().hex[:8]}")
    other, other_key = admin.create_tenant(f"alert-only-{uuid.uuid4().hex[:8]}")
    model = priced_model(admin, "1")
    for tenant in (tid, other):
        ended_job(url, tenant, model, prompt_tokens=2 * M, completion_tokens=0)  # 2.00
    assert chat(sim_stack, key).status_code == 200
    stopped = admin.ok("PUT", f"/admin/tenants/{tid}/budget",
                       json={"monthly_limit": "1.5", "hard_stop": True})
    assert stopped["stopped"] is True  # judged when set, not at the next check
    admin.ok("PUT", f"/admin/tenants/{other}/budget", json={"monthly_limit": "1.5"})
    wait_until(lambda: chat(sim_stack, key).status_code == 429, 15, "the stop at the door")
    refused = chat(sim_stack, key)
    assert refused.json()["error"]["code"] == "insufficient_quota"
    assert refused.json()["error"]["type"] == "insufficient_quota"
    assert refused.headers["x-should-retry"] == "false"
    assert 0 < int(refused.headers["retry-after"]) <= 31 * 86400  # the month's end
    client = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=2)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="sim-model", max_tokens=2,
                                       messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "insufficient_quota"
    batch = httpx.post(sim_stack.base_url + "/v1/batches", timeout=30,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"input_file_id": "file-x", "endpoint": "/v1/chat/completions",
                             "completion_window": "24h"})
    assert batch.status_code == 429 and batch.json()["error"]["code"] == "insufficient_quota"
    listed = httpx.get(sim_stack.base_url + "/v1/models", timeout=30,
                       headers={"Authorization": f"Bearer {key}"})
    assert listed.status_code == 200  # reads stay open
    assert chat(sim_stack, other_key).status_code == 200  # alert only: never refused
    admin.ok("PUT", f"/admin/tenants/{tid}/budget",
             json={"monthly_limit": "100", "hard_stop": True})
    wait_until(lambda: chat(sim_stack, key).status_code == 200, 15, "the stop lifted")
