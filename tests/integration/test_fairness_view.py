"""Fairness you can read: /admin/live's fairness section and the dispatcher's gauges come
from the same window (service.store.fairness_window) and name every tenant that was served,
with its share ratio and queue waits."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.integration._scrape import has, scheduler_url, scrape
from tests.support.admin import Admin
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def test_live_view_and_gauges_show_each_served_tenant(sim_stack: Stack, admin: Admin):
    tenants = {}
    for plan in ("standard", "premium"):
        name = f"fair-{plan}-{uuid.uuid4().hex[:6]}"
        tid, key = admin.create_tenant(name, plan)
        tenants[tid] = name
        for _ in range(2):
            r = httpx.post(sim_stack.base_url + "/v1/chat/completions", timeout=60,
                           headers={"Authorization": f"Bearer {key}"},
                           json={"model": MODEL, "max_tokens": 5, "temperature": 0,
                                 "messages": [{"role": "user", "content": "share fairly"}]})
            assert r.status_code == 200, r.text

    fairness = admin.ok("GET", "/admin/live?window_s=600")["fairness"]
    assert fairness["window_s"] == 600
    mine = {t["tenant_id"]: t for t in fairness["by_tenant"] if t["tenant_id"] in tenants}
    assert set(mine) == set(tenants)
    for row in mine.values():
        assert row["class"] == "realtime" and row["jobs"] == 2
        assert row["served"] > 0 and row["fair_share"] > 0 and row["share_ratio"] > 0
        assert row["queue_wait_p50_ms"] is not None and row["queue_wait_p50_ms"] >= 0
    weights = {row["weight"] for row in mine.values()}
    assert len(weights) == 2  # each tenant carries its plan's weight
    realtime = fairness["by_class"]["realtime"]
    assert realtime["tenants"] >= 2 and 0 < realtime["jain"] <= 1.0

    # The dispatcher's gauges name the same tenants (by name, as every tenant label does).
    def exported() -> bool:
        samples = scrape(scheduler_url(sim_stack))
        return all(has(samples, "fairway_tenant_service_rate", tenant=name, **{"class": "realtime"})
                   and has(samples, "fairway_tenant_queue_wait_seconds", tenant=name,
                           quantile="0.5")
                   for name in tenants.values()) and has(
                       samples, "fairway_fairness_jain_index", **{"class": "realtime"})
    wait_until(exported, 30, "fairness gauges")
