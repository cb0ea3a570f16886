"""Webhooks through the real processes (API, dispatcher, sim worker): endpoints managed in the
admin API (validation in OpenAI's error shape, the secret shown once, audited); a real batch's
`batch.completed` delivered signed to a receiver on 127.0.0.1 that verifies it with
`standardwebhooks` and with the official openai SDK's `webhooks.unwrap`; an event that waits
out a receiver outage and a kill -9 of the dispatcher, then arrives."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.test_batches import client, jsonl, request_line, submit, wait_status
from tests.support.admin import Admin
from tests.support.stack import Stack, own_stack, wait_until
from tests.support.webhook_receiver import Receiver


@pytest.fixture(scope="module")
def hook_stack() -> Iterator[Stack]:
    env = {
        "FAIRWAY_SERVED_MODEL_NAME": "sim-model",
        "FAIRWAY_LEASE_SECONDS": "3",
        "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
        "FAIRWAY_BATCH_MAINTENANCE_SECONDS": "0.3",
        "FAIRWAY_WEBHOOK_TIMEOUT_SECONDS": "2",
        "FAIRWAY_WEBHOOK_BACKOFF_BASE_SECONDS": "0.3",
        "FAIRWAY_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
        "FAIRWAY_WEBHOOK_POLL_SECONDS": "0.1",
        "FAIRWAY_WEBHOOK_ALLOW_PRIVATE": "true",  # the receiver is on 127.0.0.1
    }
    with own_stack("webhooks", env, workers=("whsim-1",)) as stack:
        yield stack


@pytest.fixture
def admin(hook_stack: Stack) -> Admin:
    return Admin(hook_stack.base_url)


def hooks(tenant_id: str) -> str:
    return f"/admin/tenants/{tenant_id}/webhooks"


def bad(admin: Admin, method: str, path: str, body: Any) -> dict[str, Any]:
    r = admin.http.request(method, path, json=body)
    assert r.status_code == 400, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


def test_endpoints_in_the_admin_api(hook_stack: Stack, admin: Admin):
    tid, _ = admin.create_tenant(f"whadm-{uuid.uuid4().hex[:8]}")
    made = admin.ok("POST", hooks(tid), json={"url": "https://example.test/hook",
                                              "event_types": ["batch.failed", "batch.completed",
                                                              "batch.completed"]})
    wid, secret = made["id"], made["secret"]
    assert wid.startswith("wh_") and secret.startswith("whsec_")
    assert made["event_types"] == ["batch.completed", "batch.failed"] and made["enabled"]
    read = admin.ok("GET", f"{hooks(tid)}/{wid}")
    assert "secret" not in read and read["secret_hint"] == secret[:10] + "..."
    assert [w["id"] for w in admin.ok("GET", hooks(tid))["data"]] == [wid]

    assert bad(admin, "POST", hooks(tid), {"url": "ftp://x/y", "event_types":
                                           ["batch.completed"]})["param"] == "url"
    assert bad(admin, "POST", hooks(tid), {"url": "http://", "event_types":
                                           ["batch.completed"]})["param"] == "url"
    assert bad(admin, "POST", hooks(tid), {"url": "https://a.test/x", "event_types":
                                           ["batch.done"]})["param"] == "event_types"
    assert bad(admin, "POST", hooks(tid), {"url": "https://a.test/x",
                                           "event_types": []})["param"] == "event_types"
    assert bad(admin, "PATCH", f"{hooks(tid)}/{wid}", {"url": "https://a.test/\x01"})[
        "param"] == "url"
    assert bad(admin, "PATCH", f"{hooks(tid)}/{wid}", {"secret": "x"})["param"] == "secret"
    assert bad(admin, "POST", f"{hooks(tid)}/{wid}/rotate_secret",
               {"previous_secret_grace_seconds": -1})["param"] == "previous_secret_grace_seconds"

    other, _ = admin.create_tenant(f"whoth-{uuid.uuid4().hex[:8]}")
    for path in (f"{hooks(other)}/{wid}", f"{hooks(tid)}/wh_{uuid.uuid4().hex}",
                 f"{hooks(tid)}/nonsense", f"{hooks(str(uuid.uuid4()))}/{wid}"):
        r = admin.http.get(path)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"

    assert not admin.ok("PATCH", f"{hooks(tid)}/{wid}", json={"enabled": False})["enabled"]
    changed = admin.ok("PATCH", f"{hooks(tid)}/{wid}",
                       json={"url": "https://example.test/v2", "event_types": ["batch.expired"]})
    assert (changed["url"], changed["event_types"]) == ("https://example.test/v2",
                                                        ["batch.expired"])
    rotated = admin.ok("POST", f"{hooks(tid)}/{wid}/rotate_secret", json={})
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != secret
    assert rotated["previous_secret_expires_at"] is not None
    assert admin.ok("GET", f"{hooks(tid)}/{wid}/deliveries") == {
        "object": "list", "data": [], "has_more": False}
    assert admin.ok("DELETE", f"{hooks(tid)}/{wid}")["deleted"] is True
    assert admin.http.get(f"{hooks(tid)}/{wid}").status_code == 404

    audit = admin.ok("GET", "/admin/audit", params={"target_id": wid})["data"]
    assert [e["action"] for e in reversed(audit)] == [
        "webhook.create", "webhook.disable", "webhook.update", "webhook.rotate_secret",
        "webhook.delete"]
    assert all(e["actor"] == "admin:pytest" for e in audit)
    assert "whsec_" not in str(audit)  # never a secret in the audit log


def test_a_real_batch_completes_and_its_event_arrives_signed(hook_stack: Stack, admin: Admin):
    tid, key = admin.create_tenant(f"whok-{uuid.uuid4().hex[:8]}")
    receiver = Receiver().start()
    try:
        made = admin.ok("POST", hooks(tid), json={"url": receiver.url,
                                                  "event_types": ["batch.completed"]})
        receiver.secrets.append(made["secret"])
        api = client(hook_stack, key)
        batch = submit(api, jsonl([request_line(f"r{i}") for i in range(3)]))
        assert wait_status(api, batch.id, {"completed", "failed"}).status == "completed"
        wait_until(lambda: len(receiver.received) == 1, 30, "the webhook", hook_stack)
    finally:
        receiver.stop()
    got = receiver.received[0]
    assert got.event["type"] == "batch.completed" and got.event["object"] == "event"
    assert got.event["data"] == {"id": batch.id} and got.event["id"].startswith("evt_")
    assert got.headers["webhook-id"] == got.event["id"]
    assert got.headers["content-type"] == "application/json"
    # The official SDK's verifier accepts it as an OpenAI webhook, typed.
    unwrapped = openai.OpenAI(api_key="unused").webhooks.unwrap(
        got.body, got.headers, secret=made["secret"])
    assert unwrapped.type == "batch.completed" and unwrapped.data.id == batch.id
    assert receiver.refused == 0

    [log] = admin.ok("GET", f"{hooks(tid)}/{made['id']}/deliveries")["data"]
    assert (log["event_id"], log["event_type"], log["status"], log["attempts"],
            log["last_status_code"]) == (got.event["id"], "batch.completed", "delivered", 1, 200)
    assert log["log"][0]["status_code"] == 200 and log["next_attempt_at"] is None

    # The admin sends it again: the same event id, a fresh signature.
    receiver.start()
    try:
        admin.ok("PATCH", f"{hooks(tid)}/{made['id']}", json={"enabled": False})  # it waits
        again = admin.ok("POST", f"{hooks(tid)}/{made['id']}/deliveries/{log['id']}/redeliver")
        assert again["status"] == "pending"
        r = admin.http.post(f"{hooks(tid)}/{made['id']}/deliveries/{log['id']}/redeliver")
        assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"
        admin.ok("PATCH", f"{hooks(tid)}/{made['id']}", json={"enabled": True})
        wait_until(lambda: len(receiver.received) >= 2, 30, "the redelivery", hook_stack)
    finally:
        receiver.stop()
    assert receiver.received[1].event == got.event
    assert receiver.received[1].headers["webhook-id"] == got.headers["webhook-id"]
    r = admin.http.post(f"{hooks(tid)}/{made['id']}/deliveries/999999999/redeliver")
    assert r.status_code == 404


def test_an_event_waits_out_a_receiver_outage_and_a_dispatcher_kill(hook_stack: Stack,
                                                                     admin: Admin):
    tid, key = admin.create_tenant(f"whdown-{uuid.uuid4().hex[:8]}")
    receiver = Receiver()  # down: nothing listens on its port yet
    made = admin.ok("POST", hooks(tid), json={"url": receiver.url,
                                              "event_types": ["batch.completed"]})
    path = f"{hooks(tid)}/{made['id']}/deliveries"
    api = client(hook_stack, key)
    batch = submit(api, jsonl([request_line("r0")]))
    assert wait_status(api, batch.id, {"completed", "failed"}).status == "completed"

    def failed_attempts() -> int:
        data = admin.ok("GET", path)["data"]
        return int(data[0]["attempts"]) if data else 0

    wait_until(lambda: failed_attempts() >= 2, 30, "failed attempts", hook_stack)
    hook_stack.kill("scheduler")  # kill -9: whatever it held is found again by the next
    hook_stack.start_dispatcher("scheduler-2")
    # Rotated while pending: the new secret signs, the old one too during its grace period.
    rotated = admin.ok("POST", f"{hooks(tid)}/{made['id']}/rotate_secret",
                       json={"previous_secret_grace_seconds": 3600})
    receiver.secrets.append(rotated["secret"])
    receiver.start()
    try:
        wait_until(lambda: len(receiver.received) >= 1, 60, "the webhook after the outage",
                   hook_stack)
        time.sleep(1)
    finally:
        receiver.stop()
    assert {r.event["data"]["id"] for r in receiver.received} == {batch.id}
    got = receiver.received[0]
    assert len(got.headers["webhook-signature"].split(" ")) == 2  # new and old secret
    [log] = admin.ok("GET", path)["data"]
    assert log["status"] == "delivered" and log["last_status_code"] == 200
    assert log["attempts"] >= 3 and log["log"][-1]["status_code"] == 200
    assert all("ConnectError" in (a["error"] or "") for a in log["log"][:-1])


def test_webhook_routes_refuse_tenant_keys(hook_stack: Stack, admin: Admin):
    tid, key = admin.create_tenant(f"whkey-{uuid.uuid4().hex[:8]}")
    r = httpx.get(hook_stack.base_url + hooks(tid), headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403
