"""The admin reads the dashboard uses: audit pages (offset, filters, names), usage by day and
by key, queues by plan and tenant, SLO attainment over time, recent refusals, batches across
tenants and their cancel, tenant search; and the dashboard's files and /favicon.ico."""

from __future__ import annotations

import io
import json
import uuid

import httpx
import openai
import psycopg
import pytest

from tests.support.admin import Admin
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def chat(stack: Stack, key: str) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hello"}]})


def test_audit_pages_by_offset_with_names_and_filters(admin: Admin):
    name = f"audit-{uuid.uuid4().hex[:8]}"
    tid, _ = admin.create_tenant(name)
    admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "ci-key"})
    for n in range(1, 24):
        admin.set_quotas(tid, requests_per_minute=n)
    first = admin.ok("GET", f"/admin/audit?target_id={tid}&limit=10")
    second = admin.ok("GET", f"/admin/audit?target_id={tid}&limit=10&offset=10")
    assert first["total"] == 26  # create, key.issue (the create's key and ci-key), 23 quotas
    assert [e["id"] for e in first["data"]] != [e["id"] for e in second["data"]]
    assert first["data"][-1]["id"] > second["data"][0]["id"]  # newest first, no overlap
    assert {e["target_name"] for e in first["data"]} == {name}
    keys = admin.ok("GET", f"/admin/audit?target_id={tid}&action=key.")
    assert keys["total"] == 2 and {e["key_name"] for e in keys["data"]} == {"default", "ci-key"}
    assert admin.ok("GET", f"/admin/audit?actor=nobody-{name}")["total"] == 0
    admin.ok("DELETE", f"/admin/tenants/{tid}")
    gone = admin.ok("GET", f"/admin/audit?target_id={tid}&limit=1")["data"][0]
    assert gone["action"] == "tenant.delete" and gone["target_name"] == name


def test_usage_by_day_and_by_key(sim_stack: Stack, admin: Admin):
    tid, key_a = admin.create_tenant(f"usage-{uuid.uuid4().hex[:8]}")
    key_b = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "second"})
    assert chat(sim_stack, key_a).status_code == 200
    assert chat(sim_stack, key_b["key"]).status_code == 200
    assert chat(sim_stack, key_b["key"]).status_code == 200

    wait_until(lambda: admin.ok("GET", f"/admin/usage/series?tenant_id={tid}&days=7")[
        "totals"]["requests"] >= 3, 10, "usage rolled up", sim_stack)  # within about a second
    by_model = admin.ok("GET", f"/admin/usage/series?tenant_id={tid}&days=7")
    assert len(by_model["days"]) == 7
    assert [s["key"] for s in by_model["series"]] == [MODEL]
    assert by_model["series"][0]["requests"][-1] == 3 and by_model["totals"]["requests"] == 3

    per_key = {u["key_id"]: u for u in admin.ok(
        "GET", f"/admin/usage/keys?tenant_id={tid}")["data"]}
    assert per_key[key_b["id"]]["requests"] == 2
    assert sum(u["requests"] for u in per_key.values()) == 3
    assert per_key[key_b["id"]]["completion_tokens"] > 0

    by_key = admin.ok("GET", f"/admin/usage/series?tenant_id={tid}&days=3&group_by=key")
    labels = {s["label"]: s["requests"][-1] for s in by_key["series"]}
    first_prefix = admin.ok("GET", f"/admin/tenants/{tid}/keys")["data"][0]["prefix"]
    assert labels == {f"default ({first_prefix}…)": 1, f"second ({key_b['prefix']}…)": 2}
    r = admin.http.get("/admin/usage/series?group_by=key")
    assert r.status_code == 400 and r.json()["error"]["param"] == "tenant_id"


def test_queues_by_tier_and_tenant(sim_stack: Stack, admin: Admin, database_url: str):
    name = f"queue-{uuid.uuid4().hex[:8]}"
    tid, _ = admin.create_tenant(name, "premium")
    # Jobs for a model no worker serves stay queued: a queue the dispatcher cannot drain.
    with psycopg.connect(database_url, autocommit=True) as conn:
        for kind in ("realtime", "realtime", "batch"):
            conn.execute(
                "INSERT INTO jobs (id, tenant_id, kind, service_tier, priority, endpoint, model,"
                " request, stream, max_tokens, deadline_at, status, attempt) VALUES (%s, %s, %s,"
                " 'default', 1, 'chat.completions', 'ghost-model', '{}', false, 4,"
                " now() + interval '1 hour', 'queued', 0)", (uuid.uuid4(), tid, kind))
    try:
        out = admin.ok("GET", "/admin/queues")
        mine = next(t for t in out["by_tenant"] if t["tenant_id"] == tid)
        assert (mine["tenant"], mine["tier"]) == (name, "premium")
        assert (mine["realtime_queued"], mine["batch_queued"], mine["queued"]) == (2, 1, 3)
        premium = next(t for t in out["by_tier"] if t["tier"] == "premium")
        assert premium["queued"] >= 3
    finally:
        admin.ok("DELETE", f"/admin/tenants/{tid}")


def test_slo_series_and_refusals(sim_stack: Stack, admin: Admin):
    name = f"slo-{uuid.uuid4().hex[:8]}"
    tid, key = admin.create_tenant(name)
    assert chat(sim_stack, key).status_code == 200
    out = admin.ok("GET", "/admin/slo/series?window_s=600&bucket_s=60")
    assert out["requests"] >= 1 and out["buckets"]
    assert out["ttft_attainment"] is not None and out["tpot_attainment"] is not None
    assert {"tier": "standard", "ttft_slo_ms": 1000, "tpot_slo_ms": 100} in out["targets"]
    assert set(out["preemptions"]) == {"window_s", "jobs", "preemptions", "recomputed_tokens"}
    r = admin.http.get("/admin/slo/series?window_s=600000&bucket_s=1")
    assert r.status_code == 400 and r.json()["error"]["param"] == "bucket_s"

    admin.set_quotas(tid, requests_per_minute=1)
    codes = [chat(sim_stack, key).status_code for _ in range(2)]
    assert 429 in codes
    recent = admin.ok("GET", "/admin/refusals?window_s=60")["data"]
    assert any(r["tenant"] == name and r["reason"] == "requests_per_minute" for r in recent)


def test_batches_across_tenants_and_admin_cancel(sim_stack: Stack, admin: Admin):
    name = f"batch-{uuid.uuid4().hex[:8]}"
    tid, key = admin.create_tenant(name)
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key)
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": MODEL, "max_tokens": 64,
                       "messages": [{"role": "user", "content": "hi"}]}} for i in range(50)]
    f = api.files.create(file=("in.jsonl", io.BytesIO(
        "\n".join(json.dumps(x) for x in lines).encode())), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    page = admin.ok("GET", f"/admin/batches?tenant_id={tid}")
    assert page["total"] == 1 and page["data"][0]["id"] == batch.id
    assert page["data"][0]["tenant"] == name and page["data"][0]["tenant_id"] == tid

    cancelled = admin.ok("POST", f"/admin/batches/{batch.id}/cancel")
    assert cancelled["status"] in ("cancelling", "cancelled")
    assert api.batches.retrieve(batch.id).status in ("cancelling", "cancelled")
    entry = admin.ok("GET", f"/admin/audit?target_id={tid}&action=batch.")["data"][0]
    assert entry["details"] == {"batch_id": batch.id} and entry["target_name"] == name
    assert admin.http.post("/admin/batches/batch_nope/cancel").status_code == 404
    assert admin.ok("GET", "/admin/batches?status=open&limit=1")["limit"] == 1
    assert admin.http.get("/admin/batches?status=bogus").status_code == 400


def test_tenant_search_filters_and_pages(admin: Admin):
    stem = f"find-{uuid.uuid4().hex[:6]}"
    ids = [admin.create_tenant(f"{stem}-{i}")[0] for i in range(3)]
    admin.ok("PATCH", f"/admin/tenants/{ids[0]}", json={"suspended": True})
    page = admin.ok("GET", f"/admin/search/tenants?q={stem.upper()}&limit=2")
    assert page["total"] == 3 and [t["name"] for t in page["data"]] == [f"{stem}-0", f"{stem}-1"]
    rest = admin.ok("GET", f"/admin/search/tenants?q={stem}&limit=2&offset=2")
    assert [t["name"] for t in rest["data"]] == [f"{stem}-2"]
    suspended = admin.ok("GET", f"/admin/search/tenants?q={stem}&status=suspended")
    assert [t["id"] for t in suspended["data"]] == [ids[0]]
    assert admin.ok("GET", "/admin/search/tenants?q=%25_")["total"] == 0  # LIKE escaped


def test_dashboard_files_and_favicon(sim_stack: Stack):
    base = sim_stack.base_url
    icon = httpx.get(base + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
    index = httpx.get(base + "/admin/ui/")
    assert "script-src 'self'" in index.headers["content-security-policy"]
    for path in ("app.js", "js/pages/overview.js", "vendor/preact.mjs", "vendor/uPlot.min.css"):
        assert httpx.get(f"{base}/admin/ui/{path}").status_code == 200, path
    for path in ("../../pyproject.toml", "vendor/README.md", "nope.js", "%2e%2e/README.md"):
        assert httpx.get(f"{base}/admin/ui/{path}").status_code == 404, path
