"""/admin/live and /metrics judge SLO attainment by the one definition (slo_rules): TTFT and
TPOT separately and both together, against the tenant's plan targets, which both show.

Before, the admin view judged TTFT and TPOT together while the metric judged TTFT alone, so
the same traffic read 20% in one and 30 of 34 in the other."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.integration._scrape import api_url, scheduler_url, scrape, total
from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def test_live_view_and_metrics_agree_per_kind(sim_stack: Stack, admin: Admin):
    # A plan any start meets (60 s to the first token) and no sim token meets (1 ms each).
    plan = f"slo{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/tiers/{plan}", json={
        "weight": 1, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": 60_000,
        "tpot_slo_ms": 1, "quotas": NO_LIMITS})
    name = f"slo-{uuid.uuid4().hex[:8]}"
    tid, key = admin.create_tenant(name, plan)
    tokens = []
    for _ in range(3):
        r = httpx.post(sim_stack.base_url + "/v1/chat/completions", timeout=60,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": MODEL, "max_tokens": 6, "temperature": 0,
                             "messages": [{"role": "user", "content": "judge me"}]})
        assert r.status_code == 200, r.text
        tokens.append(r.json()["usage"]["completion_tokens"])
    # Sim tokens come a step (>= 20 ms) apart: only an answer of under two tokens meets TPOT.
    tpot_met = sum(1 for n in tokens if n < 2)

    slo = admin.ok("GET", "/admin/live?window_s=600")["slo"]
    mine = next(s for s in slo["by_tenant"] if s["tenant_id"] == tid)
    assert mine["requests"] == 3
    assert (mine["ttft_slo_ms"], mine["tpot_slo_ms"]) == (60_000, 1)
    assert {"tier": plan, "ttft_slo_ms": 60_000, "tpot_slo_ms": 1} in slo["targets"]
    assert mine["ttft_attainment"] == 1.0
    assert mine["combined_kind"] == "both"
    assert mine["attainment"] == mine["by_kind"]["both"]["attainment"]  # the old field
    assert mine["tpot_met"] == tpot_met and mine["by_kind"]["both"]["met"] == tpot_met
    for fleet_field in ("ttft_attainment", "tpot_attainment", "attainment", "by_kind"):
        assert fleet_field in slo

    # The API's counters (the tenant's name is its label) say the same, kind by kind.
    api = scrape(api_url(sim_stack))
    for kind in ("ttft", "tpot", "both"):
        met = total(api, "fairway_slo_requests_total", tenant=name, kind=kind, outcome="met")
        judged = total(api, "fairway_slo_requests_total", tenant=name, kind=kind)
        assert judged == 3, kind
        assert met == mine["by_kind"][kind]["met"], kind
    # And the dispatcher exports the plan's targets for the panels to draw.
    wait_until(lambda: total(scrape(scheduler_url(sim_stack)), "fairway_slo_target_seconds",
                             tenant_tier=plan, kind="tpot") == 0.001, 15, "plan targets")


def test_jobs_are_judged_under_the_plan_they_were_admitted_on(sim_stack: Stack, admin: Admin):
    """Moving a tenant to another plan does not re-judge its past jobs: they keep the plan and
    targets they were admitted under, in /admin/live (the SLO chart reads the same stored
    targets) and the counters alike."""
    loose, tight = (f"loose{uuid.uuid4().hex[:6]}", f"tight{uuid.uuid4().hex[:6]}")
    for plan, ttft_ms in ((loose, 60_000), (tight, 1)):
        admin.ok("PUT", f"/admin/tiers/{plan}", json={
            "weight": 1, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": ttft_ms,
            "tpot_slo_ms": 60_000, "quotas": NO_LIMITS})
    name = f"move-{uuid.uuid4().hex[:8]}"
    tid, key = admin.create_tenant(name, loose)

    def chat() -> None:
        r = httpx.post(sim_stack.base_url + "/v1/chat/completions", timeout=60,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": MODEL, "max_tokens": 4, "temperature": 0,
                             "messages": [{"role": "user", "content": "judge me once"}]})
        assert r.status_code == 200, r.text

    for _ in range(2):
        chat()
    admin.ok("PATCH", f"/admin/tenants/{tid}", json={"tier": tight})
    chat()  # admitted under the tight plan: no first token comes within 1 ms

    slo = admin.ok("GET", "/admin/live?window_s=600")["slo"]
    rows = {s["tier"]: s for s in slo["by_tenant"] if s["tenant_id"] == tid}
    assert set(rows) == {loose, tight}
    assert (rows[loose]["requests"], rows[loose]["ttft_met"]) == (2, 2)
    assert rows[loose]["ttft_slo_ms"] == 60_000
    assert (rows[tight]["requests"], rows[tight]["ttft_met"]) == (1, 0)
    assert rows[tight]["ttft_slo_ms"] == 1

    api = scrape(api_url(sim_stack))
    assert total(api, "fairway_slo_requests_total", tenant=name, kind="ttft",
                 outcome="met") == 2
    assert total(api, "fairway_slo_requests_total", tenant=name, kind="ttft",
                 outcome="missed") == 1
