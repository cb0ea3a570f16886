"""Per-key policy through the official SDK on a running stack: an expired key is told it
expired, a model outside the key's allow-list is refused as OpenAI refuses a restricted key,
a key's own rate and concurrency limits answer 429 with Retry-After while another key of the
same tenant goes on, a revoked key stops at once, an edit made on another API process binds
within the key cache's TTL, and the admin API keeps a key's limits within its tenant's."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
import time
import uuid

import openai
import pytest
from sqlalchemy import update

from service.store.db import sync_session
from service.store.models.tenants import ApiKey
from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack

MODEL = "sim-model"
KEY_CACHE_S = 5.0  # FAIRWAY_KEY_CACHE_SECONDS: the test stack keeps the default


def _client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0)


def _chat(client: openai.OpenAI, model: str = MODEL, max_tokens: int = 4) -> str:
    out = client.chat.completions.create(model=model, max_tokens=max_tokens, temperature=0,
                                         messages=[{"role": "user", "content": "key"}])
    return out.choices[0].message.content or ""


def _tenant(admin: Admin, **tenant_limits: object) -> str:
    """A tenant on an unlimited plan (with these overrides); its first key is not used."""
    plan = f"kp{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/tiers/{plan}", json={
        "weight": 1, "allowed_service_tiers": ["auto", "default", "flex"],
        "ttft_slo_ms": 60_000, "tpot_slo_ms": 60_000, "quotas": NO_LIMITS})
    tenant_id, _ = admin.create_tenant(f"kp-{uuid.uuid4().hex[:6]}", plan)
    if tenant_limits:
        admin.set_quotas(tenant_id, **tenant_limits)
    return tenant_id


def _key(admin: Admin, tenant_id: str, **policy: object) -> dict:
    return admin.ok("POST", f"/admin/tenants/{tenant_id}/keys", json=policy)


def test_an_expired_key_is_told_it_expired(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin), name="short-lived")
    client = _client(sim_stack, key["key"])
    assert _chat(client)
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    admin.ok("PATCH", f"/admin/keys/{key['id']}", json={"expires_at": soon.isoformat()})
    assert _chat(client)  # cached with its expiry, which binds to the second
    time.sleep(max(0.0, (soon - dt.datetime.now(dt.UTC)).total_seconds()) + 0.1)
    with pytest.raises(openai.AuthenticationError) as refused:
        _chat(client)
    assert refused.value.code == "invalid_api_key"
    assert "expired" in refused.value.message
    listed = admin.ok("GET", f"/admin/keys/{key['id']}")
    assert listed["status"] == "expired"


def test_a_model_outside_the_allow_list_is_403_model_not_found(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    tenant_id = _tenant(admin)
    only_other = _key(admin, tenant_id, allowed_models=["another-model"])
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _chat(_client(sim_stack, only_other["key"]))
    assert refused.value.code == "model_not_found"
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == "model"
    assert MODEL in refused.value.message
    allowed = _key(admin, tenant_id, allowed_models=[MODEL, "another-model"])
    assert _chat(_client(sim_stack, allowed["key"]))
    # The models list shows a restricted key only what it may use.
    restricted = _client(sim_stack, only_other["key"])
    assert MODEL not in [m.id for m in restricted.models.list().data]
    with pytest.raises(openai.NotFoundError):
        restricted.models.retrieve(MODEL)
    assert MODEL in [m.id for m in _client(sim_stack, allowed["key"]).models.list().data]
    # An edit binds at once on the process that made it.
    admin.ok("PATCH", f"/admin/keys/{only_other['id']}", json={"allowed_models": None})
    assert _chat(_client(sim_stack, only_other["key"]))


def test_a_keys_own_rate_limit_is_429_with_retry_after_and_spares_its_siblings(
        sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    tenant_id = _tenant(admin)
    limited = _key(admin, tenant_id, requests_per_minute=2)
    sibling = _key(admin, tenant_id)
    client = _client(sim_stack, limited["key"])
    _chat(client)
    _chat(client)
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client)
    assert refused.value.code == "rate_limit_exceeded"
    assert "API key" in refused.value.message and "Limit 2" in refused.value.message
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert _chat(_client(sim_stack, sibling["key"]))  # the tenant's own limits are untouched


def test_a_request_larger_than_the_keys_tokens_per_minute_never_fits(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin), tokens_per_minute=50)
    client = _client(sim_stack, key["key"])
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client, max_tokens=100)  # the prompt's estimate plus 100 is past 50
    assert "Request too large for tokens per minute" in refused.value.message
    assert "Limit 50" in refused.value.message
    assert _chat(client, max_tokens=4)  # a small one fits


def test_a_keys_concurrency_limit_holds_one_open_request(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin), concurrent_requests=1)
    client = _client(sim_stack, key["key"])
    started = threading.Event()
    done: list[str] = []

    def long_request() -> None:
        started.set()
        done.append(_chat(client, max_tokens=200))

    worker = threading.Thread(target=long_request)
    worker.start()
    started.wait()
    time.sleep(0.3)  # the long request holds the slot
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client)
    assert "concurrent" in refused.value.message.lower()
    assert int(refused.value.response.headers["retry-after"]) >= 1
    worker.join(timeout=60)
    assert done and _chat(client)  # its slot came back when it ended


def test_a_revoked_key_stops_at_once(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin))
    client = _client(sim_stack, key["key"])
    assert _chat(client)
    revoked = admin.ok("DELETE", f"/admin/keys/{key['id']}")
    assert revoked["status"] == "revoked" and revoked["revoked_at"]
    with pytest.raises(openai.AuthenticationError):
        _chat(client)


def test_a_keys_limits_stay_within_its_tenants(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    tenant_id = _tenant(admin, requests_per_minute=10)
    resp = admin.http.post(f"/admin/tenants/{tenant_id}/keys",
                           json={"requests_per_minute": 11})
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "requests_per_minute"
    key = _key(admin, tenant_id, requests_per_minute=10, tokens_per_minute=5000)
    assert (key["requests_per_minute"], key["tokens_per_minute"]) == (10, 5000)
    resp = admin.http.patch(f"/admin/keys/{key['id']}", json={"requests_per_minute": 50})
    assert resp.status_code == 400 and "tenant" in resp.json()["error"]["message"]
    changed = admin.ok("PATCH", f"/admin/keys/{key['id']}",
                       json={"requests_per_minute": None, "name": "renamed"})
    assert changed["requests_per_minute"] is None and changed["tokens_per_minute"] == 5000
    assert changed["name"] == "renamed"


@pytest.mark.parametrize("body, param", [
    ({"requests_per_minute": 0}, "requests_per_minute"),
    ({"concurrent_requests": "3"}, "concurrent_requests"),
    ({"allowed_models": []}, "allowed_models"),
    ({"allowed_models": ["  "]}, "allowed_models"),
    ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ({"name": None}, "name"),
])
def test_a_bad_policy_is_a_400_naming_the_field(sim_stack: Stack, body: dict, param: str):
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin))
    resp = admin.http.patch(f"/admin/keys/{key['id']}", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


def test_an_edit_made_elsewhere_binds_within_the_key_caches_ttl_on_a_busy_key(
        sim_stack: Stack):
    """Another API process's edit (committed there, this process's cache not cleared): a key
    used every half second, whose cached entry is renewed in the background meanwhile, is
    judged by the new policy within the cache's TTL, never later."""
    admin = Admin(sim_stack.base_url)
    key = _key(admin, _tenant(admin), allowed_models=[MODEL])
    client = _client(sim_stack, key["key"])
    assert _chat(client)  # cached now
    with sync_session(sim_stack.database_url) as session:
        session.execute(update(ApiKey).where(ApiKey.id == uuid.UUID(key["id"]))
                        .values(allowed_models=["another-model"]))
        session.commit()
    edited = time.monotonic()
    while True:
        try:
            _chat(client)
        except openai.PermissionDeniedError:
            break
        assert time.monotonic() - edited < KEY_CACHE_S + 1.5, "served past the cache's TTL"
        time.sleep(0.5)
    assert time.monotonic() - edited <= KEY_CACHE_S + 1.5


def test_a_batch_of_a_model_outside_the_allow_list_is_refused_when_created(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    tenant_id = _tenant(admin)
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": MODEL, "max_tokens": 2,
                                "messages": [{"role": "user", "content": "hi"}]}})

    def batch_with(allowed: list[str]) -> tuple[openai.OpenAI, str]:
        client = _client(sim_stack, _key(admin, tenant_id, allowed_models=allowed)["key"])
        upload = client.files.create(file=("in.jsonl", io.BytesIO(f"\n{line}\n".encode())),
                                     purpose="batch")
        return client, upload.id

    client, file_id = batch_with(["another-model"])
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    assert refused.value.code == "model_not_found" and MODEL in refused.value.message
    assert client.batches.list().data == []  # nothing was created
    client, file_id = batch_with([MODEL])
    assert client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                 completion_window="24h").id.startswith("batch_")
