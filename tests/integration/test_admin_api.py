"""The admin API: credential, tenants, keys, plans (/admin/tiers), usage, live state, audit;
isolation."""

from __future__ import annotations

import uuid

import httpx
import psycopg
import pytest

from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def chat(stack: Stack, key: str, max_tokens: int = 4) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "hello"}]})


def test_admin_routes_refuse_tenants_and_strangers(sim_stack: Stack, admin: Admin):
    _, key = admin.create_tenant(f"a-{uuid.uuid4().hex[:8]}")
    for path in ("/admin/tenants", "/admin/tiers", "/admin/usage", "/admin/live",
                 "/admin/audit"):
        assert httpx.get(sim_stack.base_url + path).status_code == 401
        r = httpx.get(sim_stack.base_url + path, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    r = httpx.post(sim_stack.base_url + "/admin/tenants", json={"name": "x"},
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403


def test_tenant_cannot_read_another_tenants_job(sim_stack: Stack, admin: Admin):
    _, key_a = admin.create_tenant(f"a-{uuid.uuid4().hex[:8]}")
    _, key_b = admin.create_tenant(f"b-{uuid.uuid4().hex[:8]}")
    job = chat(sim_stack, key_a).json()["id"]
    own = httpx.get(f"{sim_stack.base_url}/v1/jobs/{job}",
                    headers={"Authorization": f"Bearer {key_a}"})
    other = httpx.get(f"{sim_stack.base_url}/v1/jobs/{job}",
                      headers={"Authorization": f"Bearer {key_b}"})
    assert own.status_code == 200 and other.status_code == 404


def test_tenant_lifecycle_suspend_revoke_delete(sim_stack: Stack, admin: Admin):
    tid, key = admin.create_tenant(f"life-{uuid.uuid4().hex[:8]}", "free")
    assert chat(sim_stack, key).status_code == 200
    admin.ok("PATCH", f"/admin/tenants/{tid}", json={"suspended": True})
    suspended = chat(sim_stack, key)  # at once: auth reads the row every time
    assert suspended.status_code == 403, suspended.text
    assert suspended.json()["error"]["type"] == "permission_error"
    assert suspended.json()["error"]["code"] == "tenant_suspended"
    assert "suspended" in suspended.json()["error"]["message"]
    admin.ok("PATCH", f"/admin/tenants/{tid}", json={"suspended": False})
    assert chat(sim_stack, key).status_code == 200

    second = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "ci"})
    assert second["key"].startswith(second["prefix"])
    keys = admin.ok("GET", f"/admin/tenants/{tid}/keys")["data"]
    assert len(keys) == 2 and all("key" not in k and "key_hash" not in k for k in keys)
    assert any(k["last_used_at"] for k in keys)
    admin.ok("DELETE", f"/admin/tenants/{tid}/keys/{second['id']}")
    assert chat(sim_stack, second["key"]).status_code == 401
    assert chat(sim_stack, key).status_code == 200

    view = admin.ok("PATCH", f"/admin/tenants/{tid}", json={"tier": "premium"})
    assert view["tier"] == "premium" and view["weight"] == 2.0  # the dispatcher reads this
    r = admin.http.patch(f"/admin/tenants/{tid}", json={"tier": "nope"})
    assert r.status_code == 400

    admin.ok("DELETE", f"/admin/tenants/{tid}")
    assert admin.http.get(f"/admin/tenants/{tid}").status_code == 404
    assert chat(sim_stack, key).status_code == 401
    actions = [e["action"] for e in admin.ok("GET", f"/admin/audit?target_id={tid}")["data"]]
    for expected in ("tenant.create", "key.issue", "tenant.suspend", "tenant.unsuspend",
                     "key.revoke", "tenant.tier_change", "tenant.delete"):
        assert expected in actions
    entry = admin.ok("GET", f"/admin/audit?target_id={tid}")["data"][0]
    assert entry["actor"] == "admin:pytest" and entry["at"]


def test_plans_are_editable_and_audited(admin: Admin):
    plans = {p["name"]: p for p in admin.ok("GET", "/admin/tiers")["data"]}
    assert {"free", "standard", "premium", "enterprise"} <= plans.keys()
    assert "priority" not in plans["free"]["allowed_service_tiers"]
    name = f"gold{uuid.uuid4().hex[:6]}"
    body = {"weight": 3, "allowed_service_tiers": ["default", "priority"], "ttft_slo_ms": 400,
            "tpot_slo_ms": 60, "quotas": {**NO_LIMITS, "requests_per_minute": 100}}
    assert admin.ok("PUT", f"/admin/tiers/{name}", json=body)["weight"] == 3
    tid, _ = admin.create_tenant(f"g-{uuid.uuid4().hex[:8]}", name)
    body["weight"] = 5
    admin.ok("PUT", f"/admin/tiers/{name}", json=body)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["weight"] == 5  # propagated
    assert admin.http.delete(f"/admin/tiers/{name}").status_code == 409  # still has a tenant
    bad = admin.http.put(f"/admin/tiers/{name}", json={**body, "allowed_service_tiers": ["x"]})
    assert bad.status_code == 400
    entries = admin.ok("GET", f"/admin/audit?target_id={name}")["data"]
    assert [e["action"] for e in entries] == ["tier.update", "tier.create"]
    # The audit says "unlimited" as the admin API does, not null.
    assert entries[0]["details"]["to"]["quotas"]["tokens_per_minute"] == "unlimited"
    assert entries[0]["details"]["from"]["quotas"]["tokens_per_minute"] == "unlimited"
    admin.set_quotas(tid, concurrent_requests="unlimited")
    quota = admin.ok("GET", f"/admin/audit?target_id={tid}&action=quota.update")["data"][0]
    assert quota["details"]["to"]["concurrent_requests"] == "unlimited"


def test_built_in_plans_cannot_be_deleted(admin: Admin):
    for name in ("free", "standard", "premium", "enterprise"):
        r = admin.http.delete(f"/admin/tiers/{name}")
        assert r.status_code == 409 and r.json()["error"]["code"] == "builtin_plan", r.text
    plans = {p["name"] for p in admin.ok("GET", "/admin/tiers")["data"]}
    assert {"free", "standard", "premium", "enterprise"} <= plans


def test_a_plan_admits_by_queue_by_default_and_says_its_mode(admin: Admin):
    plans = {p["name"]: p for p in admin.ok("GET", "/admin/tiers")["data"]}
    assert {p["admission_mode"] for p in plans.values() if p["name"] in (
        "free", "standard", "premium", "enterprise")} == {"queue"}
    name = f"mode{uuid.uuid4().hex[:6]}"
    body = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 400,
            "tpot_slo_ms": 60, "quotas": NO_LIMITS}
    created = admin.ok("PUT", f"/admin/tiers/{name}", json=body)
    assert (created["admission_mode"], created["max_queue_wait_ms"]) == ("queue", 30_000)
    shed = admin.ok("PUT", f"/admin/tiers/{name}",
                    json={**body, "admission_mode": "shed", "max_queue_wait_ms": 5_000})
    assert (shed["admission_mode"], shed["max_queue_wait_ms"]) == ("shed", 5_000)
    for field, value in (("admission_mode", "drop"), ("max_queue_wait_ms", 0),
                         ("max_queue_wait_ms", 2**31)):
        resp = admin.http.put(f"/admin/tiers/{name}", json={**body, field: value})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == field
    admin.ok("DELETE", f"/admin/tiers/{name}")


def test_a_plan_name_longer_than_the_column_is_a_400(admin: Admin):
    body = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 400,
            "tpot_slo_ms": 60, "quotas": NO_LIMITS}
    resp = admin.http.put("/admin/tiers/" + "t" * 33, json=body)  # was a 500 (truncation)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "name"
    assert admin.http.put("/admin/tiers/" + "t" * 32, json=body).status_code == 200
    assert admin.http.delete("/admin/tiers/" + "t" * 32).status_code == 200


def test_a_plan_slo_past_its_column_is_a_400(admin: Admin):
    body = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 400,
            "tpot_slo_ms": 60, "quotas": NO_LIMITS}
    for field in ("ttft_slo_ms", "tpot_slo_ms"):
        resp = admin.http.put(f"/admin/tiers/slo{uuid.uuid4().hex[:6]}",
                              json={**body, field: 2**31})  # was a 500 (int4 out of range)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == field


def test_a_key_expiry_outside_the_years_python_reads_is_a_400(sim_stack: Stack, admin: Admin):
    tid, _ = admin.create_tenant(f"x-{uuid.uuid4().hex[:8]}")
    # Stored, these broke every later read of the tenant's keys (and the key itself) with 500.
    for expires in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00"):
        resp = admin.http.post(f"/admin/tenants/{tid}/keys", json={"expires_at": expires})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "expires_at"
    assert admin.http.get(f"/admin/tenants/{tid}/keys").status_code == 200
    key = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"expires_at": "2999-01-01T00:00"})
    assert key["expires_at"] == "2999-01-01T00:00:00+00:00"  # no offset: UTC
    assert httpx.get(sim_stack.base_url + "/v1/models", timeout=10,
                     headers={"Authorization": f"Bearer {key['key']}"}).status_code == 200


def test_quota_overrides_merge_with_plan_defaults(admin: Admin):
    tid, _ = admin.create_tenant(f"o-{uuid.uuid4().hex[:8]}", "free")
    q = admin.set_quotas(tid, requests_per_minute=5, monthly_tokens="unlimited")
    assert q["effective"]["requests_per_minute"] == 5
    assert q["effective"]["monthly_tokens"] == "unlimited"  # lifts the plan's limit
    assert q["effective"]["tokens_per_minute"] == q["tier_defaults"]["tokens_per_minute"]
    bad = admin.http.put(f"/admin/tenants/{tid}/quotas",
                         json={"overrides": {"requests_per_minute": -1}})
    assert bad.status_code == 400
    bad = admin.http.put(f"/admin/tenants/{tid}/quotas", json={"overrides": {"bogus": 1}})
    assert bad.status_code == 400


def test_usage_and_live_state(sim_stack: Stack, admin: Admin):
    tid, key = admin.create_tenant(f"u-{uuid.uuid4().hex[:8]}")
    usages = [chat(sim_stack, key, max_tokens=6).json()["usage"] for _ in range(3)]

    def usage_rows() -> list[dict[str, int]]:  # rolled up from the job rows within about a second
        return admin.ok("GET", f"/admin/usage?tenant_id={tid}&days=2")["data"]

    wait_until(lambda: sum(r["requests"] for r in usage_rows()) >= 3, 10, "usage rolled up",
               sim_stack)
    rows = usage_rows()
    assert len(rows) == 1 and rows[0]["model"] == MODEL and rows[0]["job_class"] == "realtime"
    assert rows[0]["requests"] == 3
    assert rows[0]["prompt_tokens"] == sum(u["prompt_tokens"] for u in usages)
    assert rows[0]["completion_tokens"] == sum(u["completion_tokens"] for u in usages)

    live = admin.ok("GET", "/admin/live?window_s=600")
    assert any(w["worker_id"] == "sim-1" for w in live["workers"])
    assert "by_class" in live["queues"]
    mine = [s for s in live["slo"]["by_tenant"] if s["tenant_id"] == tid]
    assert mine and mine[0]["requests"] == 3 and 0 <= mine[0]["attainment"] <= 1


def test_clear_keys_never_stored_or_logged(sim_stack: Stack, admin: Admin, database_url: str):
    tid, key = admin.create_tenant(f"k-{uuid.uuid4().hex[:8]}")
    extra = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "second"})["key"]
    assert chat(sim_stack, key).status_code == 200
    assert chat(sim_stack, "fw-wrong" + key[8:]).status_code == 401
    secret_parts = {key, extra, key[11:], extra[11:]}  # the part after the visible prefix
    with psycopg.connect(database_url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            dump = "\n".join(r[0] for r in conn.execute(
                f'SELECT row_to_json(t)::text FROM "{table}" t'))  # table names from the catalog
            for part in secret_parts:
                assert part not in dump, f"clear key found in {table}"
    for proc in sim_stack.procs.values():
        text = proc.log_path.read_text(errors="replace")
        for part in secret_parts:
            assert part not in text, f"clear key found in {proc.name} log"


def test_admin_writes_refuse_what_no_admin_means(sim_stack: Stack, admin: Admin):
    """A quota typed as text (which a form turned into NaN, sent as null) was stored as null:
    no limit. Every such write is now a 400 in OpenAI's shape naming the field, and changes
    nothing."""
    tid, _ = admin.create_tenant(f"v-{uuid.uuid4().hex[:8]}", "free")
    before = admin.quotas(tid)
    for value in (None, "abc", "1,000,000", 1.5, -1, True):
        resp = admin.http.put(f"/admin/tenants/{tid}/quotas",
                              json={"overrides": {"tokens_per_minute": value}})
        assert resp.status_code == 400, (value, resp.text)
        error = resp.json()["error"]
        assert error["param"] == "overrides.tokens_per_minute", error
        assert error["type"] == "invalid_request_error" and error["message"], error
    nan = admin.http.put(f"/admin/tenants/{tid}/quotas", headers={"content-type":
                         "application/json"}, content=b'{"overrides": {"monthly_tokens": NaN}}')
    assert nan.status_code == 400 and nan.json()["error"]["param"] == "overrides.monthly_tokens"
    assert admin.quotas(tid) == {**before, "live": admin.quotas(tid)["live"]}

    plan = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 400,
            "tpot_slo_ms": 60, "quotas": NO_LIMITS}
    name = f"v{uuid.uuid4().hex[:6]}"
    for field, value in (("weight", 0), ("weight", "2"), ("ttft_slo_ms", -1),
                         ("tpot_slo_ms", 0.5)):
        resp = admin.http.put(f"/admin/tiers/{name}", json={**plan, field: value})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == field, resp.text
    partial = {**plan, "quotas": {"requests_per_minute": 5}}
    resp = admin.http.put(f"/admin/tiers/{name}", json=partial)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"].startswith("quotas."), resp.text
    assert admin.ok("PUT", f"/admin/tiers/{name}", json=plan)["quotas"]["monthly_tokens"] == (
        "unlimited")
    # What the API shows can be written back as it is.
    shown = next(t for t in admin.ok("GET", "/admin/tiers")["data"] if t["name"] == name)
    admin.ok("PUT", f"/admin/tiers/{name}", json={k: v for k, v in shown.items() if k != "name"})
    admin.ok("DELETE", f"/admin/tiers/{name}")

    for body, param in (({"name": "   "}, "name"),
                        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at")):
        resp = admin.http.post(f"/admin/tenants/{tid}/keys", json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text
