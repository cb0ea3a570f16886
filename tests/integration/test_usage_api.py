"""The tenant's own usage and limits against real Postgres and Redis: GET
/v1/organization/usage/completions through the official OpenAI SDK's usage client (each bucket
width, each group_by, the filters, pages), one tenant never seeing another's, bad parameters
as 400s in OpenAI's shape, the CSV exports, GET /v1/limits, and a real request's tokens.

Most of it runs on a stack of its own with no worker, on ended jobs written straight into the
database at known times, so every total is exact; the last test sends a real request to the
shared sim stack.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import text

from service.cli.main import main as cli_main
from service.store.db import sync_engine, sync_session
from service.store.models.jobs import Job
from service.usage.completions import UsageQuery, usage_statement
from tests.support.admin import Admin
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, own_stack, wait_until

DAY, HOUR = 86400, 3600
USAGE = "/organization/usage/completions"


@pytest.fixture(scope="module")
def idle_stack() -> Iterator[Stack]:
    with own_stack("usageapi", {"FAIRWAY_SERVED_MODEL_NAME": "sim-model"}, workers=()) as stack:
        yield stack


def _sdk(stack: Stack, key: str) -> openai.OpenAI:
    # The usage client sends the admin key; a Fairway tenant's own key is that here.
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, admin_api_key=key,
                         max_retries=0)


def _job(tenant_id: str, at: int, *, key: str | None, model: str = "sim-model",
         kind: str = "realtime", tier: str = "default", tokens: tuple[int, int, int] = (0, 0, 0),
         ended: bool = True) -> Job:
    prompt, completion, cached = tokens
    when = dt.datetime.fromtimestamp(at, dt.UTC)
    return Job(tenant_id=uuid.UUID(tenant_id), api_key_id=uuid.UUID(key) if key else None,
               kind=kind, service_tier=tier, priority=0, endpoint="chat.completions",
               model=model, request={}, max_tokens=16,
               status="succeeded" if ended else "running", prompt_tokens=prompt,
               completion_tokens=completion, cached_tokens=cached, created_at=when,
               queued_at=when, finished_at=when + dt.timedelta(seconds=1) if ended else None,
               usage_xid=1 if ended else None)


@pytest.fixture(scope="module")
def world(idle_stack: Stack) -> dict[str, Any]:
    """Tenant A, two keys: on day 0 at 10:00 two requests (one flex) and at 10:02 one of
    another model by the second key; on day 1 at 05:00 a batch line; one request still
    running (not counted). Tenant B: one large request on day 0 at 10:00."""
    admin = Admin(idle_stack.base_url)
    a_id, a_key = admin.create_tenant(f"ua-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)
    b_id, b_key = admin.create_tenant(f"ub-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)
    a2 = admin.ok("POST", f"/admin/tenants/{a_id}/keys", json={"name": "second"})
    k1 = admin.ok("GET", f"/admin/tenants/{a_id}/keys")["data"][0]["id"]
    kb = admin.ok("GET", f"/admin/tenants/{b_id}/keys")["data"][0]["id"]
    base = (int(time.time()) // DAY - 3) * DAY  # midnight UTC three days ago
    ten = base + 10 * HOUR
    with sync_session(idle_stack.database_url) as session:
        session.add_all([
            _job(a_id, ten + 30, key=k1, tokens=(10, 5, 4)),
            _job(a_id, ten + 45, key=k1, tier="flex", tokens=(20, 7, 0)),
            _job(a_id, ten + 120, key=a2["id"], model="other-model", tokens=(30, 9, 0)),
            _job(a_id, base + DAY + 5 * HOUR, key=None, kind="batch", tokens=(40, 11, 0)),
            _job(a_id, ten + 50, key=k1, tokens=(500, 500, 0), ended=False),
            _job(b_id, ten + 10, key=kb, tokens=(1000, 1000, 0)),
        ])
        session.commit()
    return {"admin": admin, "a": _sdk(idle_stack, a_key), "b": _sdk(idle_stack, b_key),
            "a_key": a_key, "a_id": a_id, "b_id": b_id, "k1": k1, "k2": a2["id"],
            "base": base, "ten": ten}


def _usage(client: openai.OpenAI, **params: Any) -> Any:
    return client.admin.organization.usage.completions(**params)


def _totals(bucket: Any) -> tuple[int, int, int, int]:
    rs = bucket.results
    return (sum(r.num_model_requests for r in rs), sum(r.input_tokens for r in rs),
            sum(r.output_tokens for r in rs), sum(r.input_cached_tokens or 0 for r in rs))


def test_daily_buckets_by_default(world: dict[str, Any]):
    base = world["base"]
    page = _usage(world["a"], start_time=base, end_time=base + 3 * DAY)
    assert page.object == "page" and not page.has_more and page.next_page is None
    assert [(b.start_time, b.end_time) for b in page.data] == [
        (base + i * DAY, base + (i + 1) * DAY) for i in range(3)]
    assert [_totals(b) for b in page.data] == [(3, 60, 21, 4), (1, 40, 11, 0), (0, 0, 0, 0)]
    result = page.data[0].results[0]
    assert result.object == "organization.usage.completions.result"
    assert result.model is None and result.api_key_id is None  # not grouped: null


def test_hourly_and_minute_buckets(world: dict[str, Any]):
    ten = world["ten"]
    hours = _usage(world["a"], start_time=ten - HOUR, end_time=ten + 2 * HOUR,
                   bucket_width="1h")
    assert [_totals(b)[0] for b in hours.data] == [0, 3, 0]
    minutes = _usage(world["a"], start_time=ten, end_time=ten + 5 * 60, bucket_width="1m")
    assert [b.start_time for b in minutes.data] == [ten + i * 60 for i in range(5)]
    assert [_totals(b)[:2] for b in minutes.data] == [(2, 30), (0, 0), (1, 30), (0, 0), (0, 0)]


def test_range_rounds_out_to_bucket_boundaries(world: dict[str, Any]):
    ten = world["ten"]
    page = _usage(world["a"], start_time=ten + 20, end_time=ten + 61, bucket_width="1m")
    assert [(b.start_time, _totals(b)[0]) for b in page.data] == [(ten, 2), (ten + 60, 0)]


def _groups(client: openai.OpenAI, world: dict[str, Any], *group_by: str, **kw: Any
            ) -> set[tuple[Any, ...]]:
    base = world["base"]
    page = _usage(client, start_time=base, end_time=base + 2 * DAY, group_by=list(group_by),
                  **kw)
    return {((b.start_time - base) // DAY, *(getattr(r, g) for g in group_by),
         r.num_model_requests, r.input_tokens)
        for b in page.data for r in b.results}


def test_each_group_by(world: dict[str, Any]):
    a = world["a"]
    assert _groups(a, world, "model") == {
        (0, "sim-model", 2, 30), (0, "other-model", 1, 30), (1, "sim-model", 1, 40)}
    assert _groups(a, world, "api_key_id") == {
        (0, world["k1"], 2, 30), (0, world["k2"], 1, 30), (1, None, 1, 40)}
    keys = _usage(a, start_time=world["base"], end_time=world["base"] + 2 * DAY,
                  group_by=["api_key_id"])
    assert {(r.api_key_id, getattr(r, "api_key_name", "absent"))
            for b in keys.data for r in b.results} == {
        (world["k1"], "default"), (world["k2"], "second"), (None, None)}
    assert _groups(a, world, "batch") == {(0, False, 3, 60), (1, True, 1, 40)}
    assert _groups(a, world, "service_tier") == {
        (0, "default", 2, 40), (0, "flex", 1, 20), (1, "default", 1, 40)}
    assert _groups(a, world, "model", "batch") == {
        (0, "sim-model", False, 2, 30), (0, "other-model", False, 1, 30),
        (1, "sim-model", True, 1, 40)}
    # A tenant has no projects or users: accepted, one group reading null.
    assert _groups(a, world, "project_id", "user_id") == {(0, None, None, 3, 60),
                                                         (1, None, None, 1, 40)}


def test_filters(world: dict[str, Any]):
    a = world["a"]
    assert _groups(a, world, "model", models=["other-model"]) == {(0, "other-model", 1, 30)}
    assert _groups(a, world, "api_key_id", api_key_ids=[world["k2"]]) == {
        (0, world["k2"], 1, 30)}
    assert _groups(a, world, "batch", batch=True) == {(1, True, 1, 40)}
    assert _groups(a, world, "batch", batch=False) == {(0, False, 3, 60)}


def test_pages_follow_next_page(world: dict[str, Any]):
    base, a = world["base"], world["a"]
    first = _usage(a, start_time=base, end_time=base + 30 * HOUR, bucket_width="1h")
    assert len(first.data) == 24 and first.has_more and first.next_page  # 1h: 24 a page
    rest = _usage(a, start_time=base, end_time=base + 30 * HOUR, bucket_width="1h",
                  page=first.next_page)
    assert rest.data[0].start_time == base + 24 * HOUR and len(rest.data) == 6
    assert not rest.has_more and rest.next_page is None
    assert sum(_totals(b)[0] for b in [*first.data, *rest.data]) == 4
    small = _usage(a, start_time=base, end_time=base + 3 * DAY, limit=2)
    assert len(small.data) == 2 and small.has_more


def test_a_tenant_sees_only_its_own(world: dict[str, Any]):
    base, b = world["base"], world["b"]
    page = _usage(b, start_time=base, end_time=base + 2 * DAY, group_by=["api_key_id"])
    assert [_totals(x)[:2] for x in page.data] == [(1, 1000), (0, 0)]
    # Naming the other tenant's key finds nothing, as does the admin-only tenant group.
    other = _usage(b, start_time=base, end_time=base + 2 * DAY, api_key_ids=[world["k1"]])
    assert all(not x.results for x in other.data)
    with pytest.raises(openai.BadRequestError) as err:
        _usage(b, start_time=base, group_by=["tenant_id"])  # type: ignore[list-item]
    assert err.value.body["param"] == "group_by"  # type: ignore[index]


def _http(stack: Stack, key: str) -> httpx.Client:
    return httpx.Client(base_url=stack.base_url + "/v1", timeout=30,
                        headers={"Authorization": f"Bearer {key}"})


@pytest.mark.parametrize(("params", "param", "code"), [
    ({}, "start_time", "missing_required_parameter"),
    ({"start_time": "yesterday"}, "start_time", "invalid_type"),
    ({"start_time": 100, "bucket_width": "2h"}, "bucket_width", "invalid_value"),
    ({"start_time": 100, "limit": 32}, "limit", "invalid_value"),  # 1d: at most 31
    ({"start_time": 100, "bucket_width": "1m", "limit": 1441}, "limit", "invalid_value"),
    ({"start_time": 100, "end_time": 100}, "end_time", "invalid_value"),
    ({"start_time": 100, "group_by": "region"}, "group_by", "invalid_value"),
    ({"start_time": 100, "page": "page_bm9wZQ"}, "page", "invalid_value"),
    ({"start_time": 100, "api_key_ids": "key-1"}, "api_key_ids", "invalid_value"),
    ({"start_time": 100, "batch": "maybe"}, "batch", "invalid_type"),
    ({"start_time": 100, "project_ids": "proj_1"}, "project_ids", "unsupported_parameter"),
    ({"start_time": 100, "format": "xml"}, "format", "invalid_value"),
    ({"start_time": 100, "bucket_width": "1m", "format": "csv"}, "end_time", "invalid_value"),
])
def test_bad_parameters_are_400s(idle_stack: Stack, world: dict[str, Any],
                                 params: dict[str, Any], param: str, code: str):
    r = _http(idle_stack, world["a_key"]).get(USAGE, params=params)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param,
                                                              code)
    assert error["message"]


def test_the_sdk_raises_bad_request(world: dict[str, Any]):
    with pytest.raises(openai.BadRequestError) as err:
        _usage(world["a"], start_time=world["base"], bucket_width="1d", limit=40)
    assert "31" in err.value.message


def test_no_key_no_usage(idle_stack: Stack):
    r = httpx.get(idle_stack.base_url + "/v1" + USAGE, params={"start_time": 0})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_tenant_csv(idle_stack: Stack, world: dict[str, Any]):
    base = world["base"]
    r = _http(idle_stack, world["a_key"]).get(USAGE, params={
        "start_time": base, "end_time": base + 3 * DAY, "group_by": "model", "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = _rows(r.text)
    day0, day1 = (dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")
                  for t in (base, base + DAY))
    assert {(x["start_time_utc"][:10], x["model"], x["num_model_requests"], x["input_tokens"])
            for x in rows} == {(day0, "sim-model", "2", "30"), (day0, "other-model", "1", "30"),
                               (day1, "sim-model", "1", "40")}
    assert len(rows) == 3  # idle buckets have no row
    assert "tenant_id" not in rows[0]


def test_admin_csv_covers_every_tenant(world: dict[str, Any]):
    base = world["base"]
    r = world["admin"].http.get("/admin/usage.csv", params={
        "start_time": base, "end_time": base + 2 * DAY, "group_by": "batch"})
    assert r.status_code == 200, r.text
    mine = {(x["tenant_id"], x["batch"], x["num_model_requests"], x["input_tokens"])
            for x in _rows(r.text) if x["tenant_id"] in (world["a_id"], world["b_id"])}
    assert mine == {(world["a_id"], "false", "3", "60"), (world["a_id"], "true", "1", "40"),
                    (world["b_id"], "false", "1", "1000")}
    assert world["admin"].http.get("/admin/usage.csv", headers={
        "Authorization": f"Bearer {world['a_key']}"}, params={"start_time": base}
    ).status_code == 403  # a tenant key is not the admin credential


def test_admin_json_names_tenants(world: dict[str, Any]):
    base = world["base"]
    page = world["admin"].ok("GET", "/admin/usage/completions", params={
        "start_time": base, "end_time": base + DAY, "tenant_id": world["b_id"],
        "group_by": "tenant_id"})
    [result] = page["data"][0]["results"]
    assert result["tenant_id"] == world["b_id"] and result["tenant_name"].startswith("ub-")


def test_limits_are_the_tenants_own(idle_stack: Stack, world: dict[str, Any]):
    world["admin"].set_quotas(world["a_id"], requests_per_minute=120, monthly_tokens=50_000,
                              concurrent_requests=3)
    a = _http(idle_stack, world["a_key"]).get("/limits")
    assert a.status_code == 200, a.text
    body = a.json()
    assert body["object"] == "limits" and body["organization"]["id"] == world["a_id"]
    assert body["plan"]["name"] == PATIENT_PLAN
    assert body["rate_limits"]["max_requests_per_1_minute"] == 120
    assert body["rate_limits"]["max_concurrent_requests"] == 3
    assert body["current"]["remaining_requests_per_1_minute"] == 120
    assert body["current"]["open_concurrent_requests"] == 0
    month = body["monthly_tokens"]
    assert month["limit"] == 50_000 and month["remaining"] == 50_000 - month["used"]
    assert month["resets_at"] > time.time()
    b = _http(idle_stack, world["b"].api_key).get("/limits").json()
    assert b["organization"]["id"] == world["b_id"]
    assert b["rate_limits"]["max_requests_per_1_minute"] != 120


def test_a_tenants_range_is_an_index_range(idle_stack: Stack, world: dict[str, Any]):
    """The tenant's query can walk (tenant_id, created_at): no function of created_at in the
    filter. (This table is too small for the planner to prefer it unasked.)"""
    base = world["base"]
    query = UsageQuery(start_time=base, end_time=base + DAY, group_by=("model",))
    engine = sync_engine(idle_stack.database_url)
    stmt = usage_statement(query, query.window(), uuid.UUID(world["a_id"])).compile(
        engine, compile_kwargs={"literal_binds": True})
    with engine.connect() as conn:
        conn.execute(text("SET enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {stmt}")))
    assert "ix_jobs_tenant_created_id" in plan, plan
    [cond] = [line for line in plan.splitlines() if "Index Cond" in line]
    assert "tenant_id =" in cond and "created_at >=" in cond and "created_at <" in cond, plan


def test_cli_usage_and_limits(idle_stack: Stack, world: dict[str, Any],
                              capsys: pytest.CaptureFixture[str]):
    base = world["base"]
    target = ["--base-url", idle_stack.base_url + "/v1", "--api-key", world["a_key"]]
    assert cli_main(["usage", *target, "--since", str(base), "--until", str(base + 2 * DAY),
                     "--by", "model,batch"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["START", "(UTC)", "MODEL", "BATCH", "REQUESTS", "IN", "CACHED",
                                "OUT"]
    assert sorted(line.split()[2:6] for line in lines[1:]) == sorted([
        ["sim-model", "realtime", "2", "30"], ["other-model", "realtime", "1", "30"],
        ["sim-model", "batch", "1", "40"]])
    # Minute buckets over more than a page (1,440 a page) follow next_page.
    assert cli_main(["usage", *target, "--width", "1m", "--since", str(base),
                     "--until", str(base + 2 * DAY)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[2:4] for r in rows] == [["2", "30"], ["1", "30"], ["1", "40"]]
    assert cli_main(["usage", *target, "--width", "1m", "--since", "1d", "--csv"]) == 0
    assert capsys.readouterr().out.startswith("start_time,end_time,start_time_utc,")
    assert cli_main(["usage", *target, "--width", "1m", "--since", "200d"]) == 1  # 200 pages
    assert "wider --width" in capsys.readouterr().err
    assert cli_main(["limits", *target]) == 0
    out = capsys.readouterr().out
    assert PATIENT_PLAN in out and "tokens this month" in out


def test_a_real_request_is_counted(sim_stack: Stack, make_tenant: Any):
    _, key = make_tenant("usage-real")
    client = _sdk(sim_stack, key)
    start = int(time.time())
    reply = client.chat.completions.create(model="sim-model", max_tokens=6,
                                           messages=[{"role": "user", "content": "hi"}])
    assert reply.usage is not None

    found: list[Any] = []

    def counted() -> bool:
        page = _usage(client, start_time=start - 60, bucket_width="1m", group_by=["model"])
        found[:] = [r for b in page.data for r in b.results]
        return bool(found)

    wait_until(counted, 30, "the request in the usage API", sim_stack)
    [result] = found
    assert (result.model, result.num_model_requests, result.input_tokens,
            result.output_tokens) == ("sim-model", 1, reply.usage.prompt_tokens,
                                      reply.usage.completion_tokens)
