"""The spend admin API on the shared sim stack: prices (versions, classes, unpricing,
validation), spend at the price in force when each job ended, per tenant, key, model and
class, the CSV export, and budgets' reads and writes."""

from __future__ import annotations

import csv
import io
import uuid
from decimal import Decimal
from typing import Any

import pytest

from tests.support.admin import Admin
from tests.support.spend import ended_job, first_key
from tests.support.stack import Stack

M = 1_000_000


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def model_name() -> str:
    return f"org/spend-{uuid.uuid4().hex[:8]}"  # a slash, as Hugging Face names have


def set_price(admin: Admin, model: str, **fields: Any) -> Any:
    return admin.ok("PUT", "/admin/prices", json={"model": model, **fields})


def spend(admin: Admin, tenant_id: str, group_by: str) -> Any:
    return admin.ok("GET", f"/admin/spend?tenant_id={tenant_id}&group_by={group_by}")


def test_prices_are_versions_per_class_and_unpricing_keeps_history(admin: Admin) -> None:
    model = model_name()
    first = set_price(admin, model, input_per_mtok="0.15", output_per_mtok=0.6)
    assert first["status"] == "priced" and first["created_by"] == "admin:pytest"
    assert first["classes"] == {
        "realtime": {"input_per_mtok": "0.150000", "output_per_mtok": "0.600000"},
        "batch": {"input_per_mtok": "0.075000", "output_per_mtok": "0.300000"},
        "flex": {"input_per_mtok": "0.075000", "output_per_mtok": "0.300000"}}
    second = set_price(admin, model, input_per_mtok="1", output_per_mtok="2",
                       batch_discount_pct="25", flex_output_per_mtok="0.5")
    assert second["classes"]["batch"] == {"input_per_mtok": "0.750000",
                                          "output_per_mtok": "1.500000"}
    assert second["classes"]["flex"] == {"input_per_mtok": "0.500000",
                                         "output_per_mtok": "0.500000"}
    listed = {p["model"]: p for p in admin.ok("GET", "/admin/prices")["data"]}
    assert listed[model]["version"] == second["version"]
    assert listed["sim-model"]["status"] == "unpriced"  # served, never priced: costs 0
    gone = admin.ok("DELETE", "/admin/prices", params={"model": model})
    assert gone["status"] == "unpriced" and gone["classes"] is None
    resp = admin.http.delete("/admin/prices", params={"model": model})
    assert resp.status_code == 404 and resp.json()["error"]["param"] == "model"
    history = admin.ok("GET", "/admin/prices/history", params={"model": model})["data"]
    assert [h["status"] for h in history] == ["unpriced", "priced", "priced"]
    audit = admin.ok("GET", f"/admin/audit?target_id={model}&action=price.")["data"]
    assert [e["action"] for e in audit] == ["price.unprice", "price.set", "price.set"]


@pytest.mark.parametrize(("body", "param"), [
    ({"input_per_mtok": "-1", "output_per_mtok": "1"}, "input_per_mtok"),
    ({"input_per_mtok": "0.0000001", "output_per_mtok": "1"}, "input_per_mtok"),
    ({"input_per_mtok": "NaN", "output_per_mtok": "1"}, "input_per_mtok"),
    ({"input_per_mtok": "1", "output_per_mtok": "1", "batch_discount_pct": 101},
     "batch_discount_pct"),
    ({"input_per_mtok": "1", "output_per_mtok": "1", "currency": "EUR"}, "currency"),
    ({"input_per_mtok": "1"}, "output_per_mtok"),
])
def test_a_bad_price_is_a_400_naming_the_field(admin: Admin, body: dict[str, Any],
                                               param: str) -> None:
    resp = admin.http.put("/admin/prices", json={"model": model_name(), **body})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


def test_each_job_costs_the_price_in_force_when_it_ended(admin: Admin, sim_stack: Stack) -> None:
    url, model = sim_stack.database_url, model_name()
    tid, _ = admin.create_tenant(f"spend-{uuid.uuid4().hex[:8]}")
    key = first_key(url, tid)
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=M)  # before any price: 0
    set_price(admin, model, input_per_mtok="1", output_per_mtok="2")
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=M, key_id=key)  # 3
    set_price(admin, model, input_per_mtok="10", output_per_mtok="20")
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=0, key_id=key)  # 10
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=0, kind="batch")  # 5
    ended_job(url, tid, model, prompt_tokens=0, completion_tokens=M, service_tier="flex",
              key_id=key)  # 10
    before = spend(admin, tid, "model")
    assert before["totals"] == {"requests": 5, "prompt_tokens": 4 * M,
                                "completion_tokens": 3 * M, "cost": "28.000000",
                                "unpriced_requests": 1}
    set_price(admin, model, input_per_mtok="100", output_per_mtok="200")  # not retroactive
    assert spend(admin, tid, "model") == before
    by_class = {r["job_class"]: r["cost"] for r in spend(admin, tid, "job_class")["data"]}
    assert by_class == {"realtime": "13.000000", "batch": "5.000000", "flex": "10.000000"}
    by_key = spend(admin, tid, "key")["data"]
    assert [(r["key"], r["key_name"].split(" ")[0], r["cost"]) for r in by_key] == [
        (str(key), "default", "23.000000"), (None, "(batch", "5.000000")]
    overview = admin.ok("GET", "/admin/spend?group_by=tenant")
    mine = [r for r in overview["data"] if r["tenant"] == tid]
    assert mine[0]["cost"] == "28.000000" and mine[0]["tenant_name"].startswith("spend-")
    assert Decimal(overview["daily_cost"][-1]) >= 28  # ended today (UTC): the last day


def test_the_csv_export_has_a_row_per_day_tenant_key_model_and_class(admin: Admin,
                                                                     sim_stack: Stack) -> None:
    url, model = sim_stack.database_url, "=HYPERLINK(\"x\")" + uuid.uuid4().hex[:6]
    tid, _ = admin.create_tenant(f"csv-{uuid.uuid4().hex[:8]}")
    set_price(admin, model, input_per_mtok="0.5", output_per_mtok="1.5")
    ended_job(url, tid, model, prompt_tokens=2 * M, completion_tokens=M,
              key_id=first_key(url, tid))
    ended_job(url, tid, model, prompt_tokens=2 * M, completion_tokens=M, kind="batch")
    resp = admin.http.get("/admin/spend/export.csv", params={"tenant_id": tid})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/csv")
    assert "attachment" in resp.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(resp.text)))
    assert [(r["job_class"], r["key"].split(" ")[0], r["cost"], r["currency"]) for r in rows] \
        == [("batch", "(batch", "1.250000", "USD"), ("realtime", "default", "2.500000", "USD")]
    assert {r["model"] for r in rows} == {"'" + model}  # no formula reaches a spreadsheet
    assert all(r["tenant_id"] == tid and r["prompt_tokens"] == str(2 * M) for r in rows)


def test_the_window_and_tenant_are_checked(admin: Admin) -> None:
    for params, param in [({"since": "2026-02-30"}, "since"),
                          ({"since": "2026-03-02", "until": "2026-03-01"}, "since"),
                          ({"since": "2024-01-01", "until": "2026-01-01"}, "since"),
                          ({"tenant_id": "nope"}, "tenant_id")]:
        resp = admin.http.get("/admin/spend", params=params)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text


def test_a_budget_is_set_read_and_removed(admin: Admin, sim_stack: Stack) -> None:
    url, model = sim_stack.database_url, model_name()
    tid, _ = admin.create_tenant(f"budget-{uuid.uuid4().hex[:8]}")
    set_price(admin, model, input_per_mtok="2", output_per_mtok="2")
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=0)  # 2.00
    empty = admin.ok("GET", f"/admin/tenants/{tid}/budget")
    assert empty["monthly_limit"] is None and empty["spend"] == "2.000000"
    budget = admin.ok("PUT", f"/admin/tenants/{tid}/budget",
                      json={"monthly_limit": "8", "thresholds": [80, 25, 80]})
    assert budget["thresholds"] == [25, 80] and budget["hard_stop"] is False
    assert budget["percent_used"] == "25.00" and budget["stopped"] is False
    for body, param in [({"monthly_limit": 0}, "monthly_limit"),
                        ({"monthly_limit": "5", "thresholds": [0]}, "thresholds[0]"),
                        ({"monthly_limit": "5", "hard_stop": "yes"}, "hard_stop")]:
        resp = admin.http.put(f"/admin/tenants/{tid}/budget", json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text
    assert admin.ok("DELETE", f"/admin/tenants/{tid}/budget")["monthly_limit"] is None
    assert admin.http.delete(f"/admin/tenants/{tid}/budget").status_code == 404
    assert admin.http.get(f"/admin/tenants/{uuid.uuid4()}/budget").status_code == 404
