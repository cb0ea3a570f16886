"""Quotas at the door, through the real API process, dispatcher and sim worker."""

from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.admin import Admin
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def new_tenant(admin: Admin, plan: str = "standard") -> tuple[str, str]:
    return admin.create_tenant(f"q-{uuid.uuid4().hex[:8]}", plan)


def chat(stack: Stack, key: str, max_tokens: int = 4, **extra: object) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "hi"}], **extra})


def parallel(n: int, fn) -> list[httpx.Response]:  # type: ignore[no-untyped-def]
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: fn(), range(n)))


def test_requests_per_minute_exactly_k_of_n_pass(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_tenant(admin)
    admin.set_quotas(tenant_id, requests_per_minute=3)
    responses = parallel(12, lambda: chat(sim_stack, key))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 3 + [429] * 9
    for r in responses:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            assert r.json()["error"]["type"] == "rate_limit_error"
            assert 1 <= int(r.headers["Retry-After"]) <= 21  # one request per 20 s refill


def test_rate_limit_headers_through_the_openai_sdk(sim_stack: Stack, admin: Admin):
    import openai

    tenant_id, key = new_tenant(admin)
    admin.set_quotas(tenant_id, requests_per_minute=10, tokens_per_minute=10_000)
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    raw = api.chat.completions.with_raw_response.create(model=MODEL, max_tokens=4,
                                                        messages=messages)
    h = raw.headers
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("10", "9")
    assert h["x-ratelimit-reset-requests"] == "6s"  # one request refills in 60 s / 10
    assert h["x-ratelimit-limit-tokens"] == "10000"
    reserved = 10_000 - int(h["x-ratelimit-remaining-tokens"])
    assert 4 < reserved < 50  # prompt estimate + max_tokens
    assert raw.parse().choices[0].message.content
    with api.chat.completions.with_streaming_response.create(
            model=MODEL, max_tokens=4, messages=messages, stream=True) as stream:
        assert stream.headers["x-ratelimit-remaining-requests"] == "8"
        assert any(line for line in stream.iter_lines())
    # No limit, no headers.
    _, free_key = new_tenant(admin, "enterprise")
    assert "x-ratelimit-limit-requests" not in chat(sim_stack, free_key).headers


def test_concurrent_requests_limit(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_tenant(admin)
    admin.set_quotas(tenant_id, concurrent_requests=2)
    responses = parallel(6, lambda: chat(sim_stack, key, max_tokens=48, ignore_eos=True))
    assert sorted(r.status_code for r in responses) == [200, 200, 429, 429, 429, 429]
    # Slots come back when requests end.
    wait_until(lambda: admin.quotas(tenant_id)["live"]["concurrent_requests_open"] == 0, 10,
               "slots released")
    assert chat(sim_stack, key).status_code == 200


def test_token_reservation_corrected_from_real_usage(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_tenant(admin)
    admin.set_quotas(tenant_id, tokens_per_minute=600, monthly_tokens=1_000_000)
    resp = chat(sim_stack, key, max_tokens=400, stop=["\n", "."])
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    live = admin.quotas(tenant_id)["live"]
    # The month counter holds real usage, not the reservation (prompt estimate + 400).
    assert live["monthly_tokens_used"] == usage["total_tokens"]
    # The bucket was refunded: at least what real usage leaves, not 600 - 400 - prompt.
    assert live["tokens_per_minute_available"] >= 600 - usage["total_tokens"]
    if usage["completion_tokens"] < 300:
        assert live["tokens_per_minute_available"] > 600 - 400


def test_month_used_read_from_postgres_when_the_counter_is_missing(sim_stack: Stack,
                                                                    admin: Admin):
    """The month counter lives in Redis and is made lazily: not at all while the month is
    unlimited, and gone after Redis restarts. The quota view still shows what was used."""
    from redis import Redis

    from service.store.quota_store import TenantKeys, month_tag

    tenant_id, key = new_tenant(admin)  # standard: no monthly budget, so no counter
    used = 0
    for _ in range(2):
        resp = chat(sim_stack, key)
        assert resp.status_code == 200, resp.text
        used += resp.json()["usage"]["total_tokens"]

    def shown() -> int:
        return int(admin.quotas(tenant_id)["live"]["monthly_tokens_used"])

    # usage_daily is rolled up from the job rows about once a second.
    wait_until(lambda: shown() == used, 10, f"{used} tokens used shown")
    # A budget set: the next request seeds the counter; then Redis loses it.
    admin.set_quotas(tenant_id, monthly_tokens=1_000_000)
    resp = chat(sim_stack, key)
    used += resp.json()["usage"]["total_tokens"]
    wait_until(lambda: shown() == used, 10, f"{used} tokens used shown")
    month = TenantKeys(tenant_id).month(month_tag(dt.datetime.now(dt.UTC)))
    assert Redis.from_url(sim_stack.redis_url).delete(month) == 1
    wait_until(lambda: shown() == used, 10, f"{used} tokens used shown")


def test_monthly_budget_stops_new_work(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_tenant(admin)
    admin.set_quotas(tenant_id, monthly_tokens=120, monthly_alert_percent=50)
    statuses = []
    for _ in range(10):
        r = chat(sim_stack, key, max_tokens=20)
        statuses.append(r.status_code)
        if r.status_code == 429:
            body = r.json()["error"]
            assert body["code"] == "insufficient_quota" and body["type"] == "insufficient_quota"
            assert int(r.headers["Retry-After"]) >= 1
            break
    assert statuses[-1] == 429 and statuses.count(200) >= 2
    live = admin.quotas(tenant_id)["live"]
    assert live["monthly_tokens_used"] <= 120 and live["monthly_alert"]
    # Raising the budget lets work through again, on the very next call.
    admin.set_quotas(tenant_id, monthly_tokens=10_000)
    assert chat(sim_stack, key, max_tokens=20).status_code == 200


def test_service_tier_set_follows_the_tier(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_tenant(admin, "free")
    r = chat(sim_stack, key, service_tier="priority")
    assert r.status_code == 403 and r.json()["error"]["code"] == "service_tier_not_allowed"
    admin.ok("PATCH", f"/admin/tenants/{tenant_id}", json={"tier": "premium"})
    r = chat(sim_stack, key, service_tier="priority")
    assert r.status_code == 200 and r.json()["service_tier"] == "priority"


def test_redis_down_realtime_fails_closed(database_url: str, admin: Admin):
    _, key = new_tenant(admin)
    dead = Stack(database_url, "redis://127.0.0.1:1/0",
                 env_overrides={"FAIRWAY_SERVED_MODEL_NAME": MODEL})
    try:
        dead.start_api()
        r = chat(dead, key)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["code"] == "quota_unavailable"
    finally:
        dead.stop()
