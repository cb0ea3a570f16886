"""GET /admin/tenants/{id}/adapters against the shared sim stack: a tenant's live adapters with
their use over the last 30 days (requests and tokens of the jobs that named the adapter's
ft: model, and the last one) and their load times and warm workers from the workers' beats,
scoped to that tenant; older jobs, base-model jobs, another tenant's adapter of the same name
and deleted adapters do not count; an unknown tenant is a 404 in OpenAI's error shape."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import httpx
import openai

from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.settings import AdapterSettings
from tests.support.admin import Admin
from tests.support.lora_adapter import adapter_zip
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


def upload(stack: Stack, key: str, name: str) -> dict[str, Any]:
    resp = httpx.post(stack.base_url + "/v1/adapters", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      data={"name": name, "model": MODEL},
                      files={"file": ("adapter.zip", adapter_zip())})
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def chat_tokens(stack: Stack, key: str, model: str) -> int:
    api = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=60)
    reply = api.chat.completions.create(model=model, max_tokens=6, temperature=0,
                                        messages=[{"role": "user", "content": "hi"}])
    assert reply.usage is not None
    return reply.usage.total_tokens


def old_job(url: str, tenant_id: uuid.UUID, model: str, days: int) -> None:
    """A finished job that named ``model``, created ``days`` ago."""
    at = dt.datetime.now(dt.UTC) - dt.timedelta(days=days)
    with sync_session(url) as session:
        session.add(Job(tenant_id=tenant_id, kind="realtime", service_tier="default",
                        priority=1, endpoint="chat.completions", model=MODEL,
                        adapter_model=model, request={"model": model, "messages": []},
                        max_tokens=16,
                        status="succeeded", attempt=1, prompt_tokens=1000,
                        completion_tokens=1000, created_at=at, queued_at=at,
                        started_at=at, finished_at=at))
        session.commit()


def test_a_tenants_adapters_and_their_use(sim_stack: Stack, make_tenant,
                                          database_url: str) -> None:
    admin = Admin(sim_stack.base_url)
    owner_id, owner = make_tenant("lora-view")
    other_id, other = make_tenant("lora-view-other")
    used = upload(sim_stack, owner, "support-v2")
    earlier = upload(sim_stack, owner, "earlier")
    gone = upload(sim_stack, owner, "gone")
    theirs = upload(sim_stack, other, "support-v2")  # same name, another tenant's ft: name
    assert httpx.delete(sim_stack.base_url + f"/v1/adapters/{gone['id']}", timeout=30,
                        headers={"Authorization": f"Bearer {owner}"}).status_code == 200

    tokens = chat_tokens(sim_stack, owner, used["model"]) + chat_tokens(
        sim_stack, owner, used["model"])
    chat_tokens(sim_stack, owner, MODEL)  # the base model: not the adapter's use
    their_tokens = chat_tokens(sim_stack, other, theirs["model"])
    old_job(database_url, owner_id, used["model"], days=31)  # out of the window
    old_job(database_url, owner_id, earlier["model"], days=29)  # in it
    old_job(database_url, other_id, used["model"], days=1)  # another tenant's job: not counted

    view = admin.ok("GET", f"/admin/tenants/{owner_id}/adapters")
    assert (view["window_days"], view["load_time_metric"]) == (30, "fairway_lora_load_seconds")
    rows = {a["name"]: a for a in view["data"]}
    assert set(rows) == {"support-v2", "earlier"}
    first = rows["support-v2"]
    assert (first["id"], first["model"], first["base_model"], first["rank"], first["bytes"]) == (
        used["id"], used["model"], MODEL, 8, used["bytes"])
    assert (first["requests"], first["tokens"]) == (2, tokens)
    assert first["last_used_at"] is not None and first["created_at"] is not None
    assert dt.datetime.fromisoformat(first["last_used_at"]) >= dt.datetime.fromisoformat(
        first["created_at"])
    assert (rows["earlier"]["requests"], rows["earlier"]["tokens"]) == (1, 2000)

    their_view = admin.ok("GET", f"/admin/tenants/{other_id}/adapters")["data"]
    assert [(a["id"], a["requests"], a["tokens"]) for a in their_view] == [
        (theirs["id"], 1, their_tokens)]


def test_load_times_and_warm_workers_from_the_beats(sim_stack: Stack, make_tenant) -> None:
    """The sim worker sleeps FAIRWAY_SIM_ADAPTER_LOAD_S per load; its beat publishes the load
    and that it holds the adapter warm."""
    sleeps = float(sim_stack.env_overrides.get(
        "FAIRWAY_SIM_ADAPTER_LOAD_S", AdapterSettings.model_fields["sim_adapter_load_s"].default))
    admin = Admin(sim_stack.base_url)
    tenant_id, key = make_tenant("lora-view-loads")
    used = upload(sim_stack, key, "loaded")
    idle = upload(sim_stack, key, "never-loaded")
    chat_tokens(sim_stack, key, used["model"])
    chat_tokens(sim_stack, key, used["model"])  # warm: no second load

    def rows() -> dict[str, dict[str, Any]]:
        view = admin.ok("GET", f"/admin/tenants/{tenant_id}/adapters")
        return {a["name"]: a for a in view["data"]}

    wait_until(lambda: rows()["loaded"]["load_samples"] == 1, 10, "the beat's load time")
    loaded = rows()["loaded"]
    assert sleeps - 0.002 <= loaded["last_load_s"] < sleeps + 5
    assert loaded["median_load_s"] == loaded["last_load_s"]
    assert loaded["warm_on"] == ["sim-1"]
    assert {k: rows()["never-loaded"][k] for k in (
        "last_load_s", "median_load_s", "load_samples", "warm_on")} == {
        "last_load_s": None, "median_load_s": None, "load_samples": 0, "warm_on": []}
    assert rows()["never-loaded"]["id"] == idle["id"]


def test_an_unknown_tenant_is_a_404(sim_stack: Stack) -> None:
    admin = Admin(sim_stack.base_url)
    for tenant in (str(uuid.uuid4()), "not-a-uuid"):
        resp = admin.http.get(f"/admin/tenants/{tenant}/adapters")
        assert resp.status_code == 404
        assert resp.json()["error"]["code"] == "not_found"


def test_a_tenant_without_adapters_lists_none(sim_stack: Stack, make_tenant) -> None:
    tenant_id, _ = make_tenant("lora-none")
    assert Admin(sim_stack.base_url).ok("GET", f"/admin/tenants/{tenant_id}/adapters")[
        "data"] == []
