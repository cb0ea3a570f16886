"""The dashboard's actions in headless Chromium: every change to a tenant's service asks
first (cancel, then accept), plan saves that reweight tenants, batch cancel, and webhook
endpoints (secret shown once, confirmed disable/rotate/delete, delivery log)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.test_batches import client, jsonl, request_line, submit, wait_status
from tests.support.dashboard import (
    CHROMIUM,
    WIDTHS,
    Session,
    confirm,
    expect,
    hooks,
)
from tests.support.stack import Stack
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")




@pytest.mark.parametrize("width", WIDTHS)
def test_confirmations_cancel_then_accept(session: Callable[..., Session],
                                          world: dict[str, Any], width: int):
    admin = world["admin"]
    name = f"conf-{uuid.uuid4().hex[:6]}"
    tid, _ = admin.create_tenant(name)
    s = session(width)
    page = s.go(f"tenants/{tid}")

    page.click("#toggle-suspend")
    s.shot("confirm")
    confirm(page, accept=False)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["suspended"] is False
    page.click("#toggle-suspend")
    confirm(page, accept=True)
    expect(page.locator("#tenant-status")).to_have_text("suspended")
    assert admin.ok("GET", f"/admin/tenants/{tid}")["suspended"] is True
    page.click("#toggle-suspend")
    confirm(page, accept=True)
    expect(page.locator("#tenant-status")).to_have_text("active")

    page.select_option("#tenant-plan", "premium")
    page.click("#change-plan")
    confirm(page, accept=False)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["tier"] == "standard"
    page.select_option("#tenant-plan", "premium")
    page.click("#change-plan")
    confirm(page, accept=True)
    expect(page.locator(".tenant-head .badge").first).to_have_text("premium")

    page.fill("#f-key-name", "")
    page.click("#issue-key button[type=submit]")
    expect(page.locator("#err-key-name")).to_contain_text("Give the key a name")
    page.fill("#f-key-name", "temp")
    page.click("#issue-key button[type=submit]")
    secret = page.locator("#new-key-secret")
    expect(secret).to_have_value(re.compile(r"^fw-"))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("#copy-key")
    expect(page.locator(".newkey")).to_contain_text("Copied.")
    row = page.locator('#keys tr[data-key="temp"]')
    row.get_by_role("button", name="Revoke").click()
    confirm(page, accept=False)
    expect(row).to_contain_text("live")
    row.get_by_role("button", name="Revoke").click()
    confirm(page, accept=True)
    expect(row).to_contain_text("revoked")

    page.click("#delete-tenant")
    confirm(page, accept=False)
    assert admin.http.get(f"/admin/tenants/{tid}").status_code == 200
    # Deleting cannot be undone: the button stays off until the tenant's name is typed.
    page.click("#delete-tenant")
    delete = page.get_by_role("dialog").get_by_role("button", name="Delete tenant")
    expect(delete).to_be_disabled()
    page.fill("#confirm-typed", name[:-1])
    expect(delete).to_be_disabled()
    page.fill("#confirm-typed", name)
    confirm(page, accept=True)
    expect(page).to_have_url(re.compile(r"#/tenants$"))
    assert admin.http.get(f"/admin/tenants/{tid}").status_code == 404


def test_new_tenant_shows_its_first_key_secret(session: Callable[..., Session],
                                               world: dict[str, Any]):
    """Creating a tenant from the form lands on its page with the first key's secret (the
    string), not the key object."""
    admin = world["admin"]
    name = f"new-{uuid.uuid4().hex[:6]}"
    s = session(1280)
    page = s.go("tenants")
    page.fill("#f-new-name", name)
    page.click("#create-tenant button[type=submit]")
    secret = page.locator("#new-key-secret")
    expect(secret).to_have_value(re.compile(r"^fw-"))
    bearer = {"Authorization": f"Bearer {secret.input_value()}"}
    models = admin.http.get("/v1/models", headers=bearer)
    assert models.status_code == 200
    tid = page.url.rsplit("/", 1)[-1]
    admin.ok("DELETE", f"/admin/tenants/{tid}")


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_save_confirms_reweighting(session: Callable[..., Session], world: dict[str, Any],
                                        width: int):
    admin = world["admin"]
    plan = f"t{uuid.uuid4().hex[:6]}"
    body = {"weight": 1.5, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": 900,
            "tpot_slo_ms": 90,
            "quotas": {"requests_per_minute": 100, "tokens_per_minute": "unlimited",
                       "concurrent_requests": "unlimited", "batch_enqueued_tokens": "unlimited",
                       "monthly_tokens": "unlimited", "monthly_alert_percent": 80}}
    admin.ok("PUT", f"/admin/tiers/{plan}", json=body)
    tid, _ = admin.create_tenant(f"plan-{uuid.uuid4().hex[:6]}", plan)
    s = session(width)
    page = s.go("plans")
    form = page.locator(f'form[data-plan="{plan}"]')
    form.locator('input[name="weight"]').fill("0")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".field-error")).to_contain_text("above 0")
    form.locator('input[name="weight"]').fill("3")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_role("dialog")).to_contain_text("from 1.5 to 3")
    confirm(page, accept=False)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["weight"] == 1.5
    # Called off: the edit is still in the form, marked as not saved.
    expect(form.locator('input[name="weight"]')).to_have_value("3")
    expect(form.locator(".unsaved-note")).to_contain_text("Not saved")
    form.get_by_role("button", name="Save").click()
    confirm(page, accept=True)
    expect(page.locator(".notice")).to_contain_text(f"Plan {plan} saved")
    expect(form.locator(".unsaved-note")).to_have_count(0)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["weight"] == 3
    admin.ok("DELETE", f"/admin/tenants/{tid}")
    admin.ok("DELETE", f"/admin/tiers/{plan}")
    # Built-in plans offer no Delete, even with no tenant on them.
    for builtin in ("free", "standard", "premium", "enterprise"):
        builtin_form = page.locator(f'form[data-plan="{builtin}"]')
        expect(builtin_form).to_contain_text("Built-in plan")
        expect(builtin_form.get_by_role("button", name="Delete")).to_have_count(0)


def test_plan_admission_mode_and_wait_budget(session: Callable[..., Session],
                                            world: dict[str, Any]) -> None:
    admin = world["admin"]
    plan = f"m{uuid.uuid4().hex[:6]}"
    body = {"weight": 1.0, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": 900,
            "tpot_slo_ms": 90,
            "quotas": {"requests_per_minute": 100, "tokens_per_minute": "unlimited",
                       "concurrent_requests": "unlimited", "batch_enqueued_tokens": "unlimited",
                       "monthly_tokens": "unlimited", "monthly_alert_percent": 80}}
    created = admin.ok("PUT", f"/admin/tiers/{plan}", json=body)
    assert (created["admission_mode"], created["max_queue_wait_ms"]) == ("queue", 30_000)
    s = session(WIDTHS[0])
    page = s.go("plans")
    form = page.locator(f'form[data-plan="{plan}"]')
    form.locator('input[name="max_queue_wait_ms"]').fill("-5")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".field-error")).to_contain_text("above 0")
    form.locator('input[name="max_queue_wait_ms"]').fill("12000")
    form.get_by_role("button", name="Save").click()
    expect(page.locator(".notice")).to_contain_text(f"Plan {plan} saved")
    saved = {p["name"]: p for p in admin.ok("GET", "/admin/tiers")["data"]}[plan]
    assert saved["max_queue_wait_ms"] == 12_000
    # A fresh page: the save's reload re-mounts the form, and a choice made before that
    # landed would be lost with it.
    page.reload()
    form = page.locator(f'form[data-plan="{plan}"]')
    expect(form.locator('input[name="max_queue_wait_ms"]')).to_have_value("12000")
    form.locator('select[name="admission_mode"]').select_option("shed")
    expect(form.locator('input[name="max_queue_wait_ms"]')).to_have_count(0)
    form.get_by_role("button", name="Save").click()

    def saved_mode() -> tuple[str, int]:
        saved = {p["name"]: p for p in admin.ok("GET", "/admin/tiers")["data"]}[plan]
        return saved["admission_mode"], saved["max_queue_wait_ms"]

    deadline = time.monotonic() + 10
    while saved_mode()[0] != "shed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert saved_mode() == ("shed", 12_000)
    # What happens past a rate limit: refused by default, overflow when chosen.
    page.reload()
    form = page.locator(f'form[data-plan="{plan}"]')
    expect(form.locator('select[name="over_quota"]')).to_have_value("refuse")
    form.locator('select[name="over_quota"]').select_option("overflow")
    form.get_by_role("button", name="Save").click()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and {p["name"]: p for p in admin.ok(
            "GET", "/admin/tiers")["data"]}[plan]["over_quota"] != "overflow":
        time.sleep(0.1)
    assert {p["name"]: p for p in admin.ok("GET", "/admin/tiers")["data"]}[plan][
        "over_quota"] == "overflow"
    admin.ok("DELETE", f"/admin/tiers/{plan}")


@pytest.mark.parametrize("width", WIDTHS)
def test_batch_progress_and_cancel_confirmation(session: Callable[..., Session],
                                                world: dict[str, Any], width: int):
    """A batch in progress (served by the page's own route: the sim engine finishes real
    ones too fast to catch), its progress bar, and its cancel: nothing sent until accepted."""
    bid = "batch_" + uuid.uuid4().hex
    fake = {"id": bid, "object": "batch", "status": "in_progress", "model": "sim-model",
            "tenant": world["name"], "tenant_id": world["id"], "created_at": int(time.time()),
            "request_counts": {"total": 10, "completed": 4, "failed": 1}}
    posts: list[str] = []

    def batches(route: Any) -> None:
        if route.request.method == "POST":
            posts.append(route.request.url)
            route.fulfill(status=200, content_type="application/json",
                          body=json.dumps({**fake, "status": "cancelling"}))
        else:  # once cancelled: 3 queued lines stopped, 2 running ones not yet
            shown = fake if not posts else {**fake, "status": "cancelling", "request_counts": {
                "total": 10, "completed": 4, "failed": 1, "cancelled": 3}}
            route.fulfill(status=200, content_type="application/json", body=json.dumps(
                {"object": "list", "total": 1, "limit": 25, "offset": 0, "data": [shown]}))

    s = session(width)
    s.page.route("**/admin/batches**", batches)
    page = s.go("batches")
    row = page.locator(f'#batches tr[data-batch="{bid}"]')
    expect(row.get_by_role("progressbar")).to_contain_text("5 / 10")
    s.fits()
    row.get_by_role("button", name="Cancel").click()
    s.shot("confirm-batch-cancel")
    confirm(page, accept=False)
    assert posts == []
    row.get_by_role("button", name="Cancel").click()
    confirm(page, accept=True)
    expect(page.locator(".notice")).to_contain_text("Batch cancelling")
    assert posts == [f"{world['base']}/admin/batches/{bid}/cancel"]
    # Why it is still cancelling.
    expect(row.locator('[data-why="cancelling"]')).to_contain_text(
        "waiting for 2 running lines to stop")


@pytest.mark.parametrize("width", WIDTHS)
def test_webhook_added_with_its_secret_shown_once(session: Callable[..., Session],
                                                  world: dict[str, Any], width: int):
    admin = world["admin"]
    tid, _ = admin.create_tenant(f"hook-{uuid.uuid4().hex[:6]}")
    s = session(width)
    page = s.go(f"tenants/{tid}")
    expect(page.locator("#webhooks-section")).to_contain_text("No webhook endpoints")
    # Every event type the server knows, from its schema, all checked to start with.
    boxes = page.locator('#webhook-events input[type="checkbox"]')
    expect(boxes).to_have_count(9)
    for t in ("batch.completed", "batch.cancelled", "response.incomplete", "response.failed",
              "budget.threshold_reached"):
        expect(page.locator(f'#webhook-events input[value="{t}"]')).to_be_checked()

    for box in boxes.all():
        box.uncheck()
    page.fill("#f-webhook-url", "")
    page.click("#add-webhook button[type=submit]")
    expect(page.locator("#err-webhook-url")).to_be_visible()
    expect(page.locator("#err-webhook-events")).to_contain_text("at least one")

    # The server judges the URL: its error lands next to the URL field.
    page.check('#webhook-events input[value="batch.completed"]')
    page.check('#webhook-events input[value="response.failed"]')
    page.fill("#f-webhook-url", "ftp://example.test/hook")
    s.allow(r"status of 400")
    page.click("#add-webhook button[type=submit]")
    expect(page.locator("#err-webhook-url")).to_contain_text("http:// or https://")
    expect(page.locator(".notice.error")).to_have_count(0)  # at the field, not twice
    assert admin.ok("GET", hooks(tid))["data"] == []
    s.shot("webhook-invalid")

    page.fill("#f-webhook-url", "https://example.test/hook")
    page.click("#add-webhook button[type=submit]")
    secret = page.locator("#new-webhook-secret")
    expect(secret).to_have_value(re.compile(r"^whsec_"))
    shown = secret.input_value()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("#copy-webhook-secret")
    expect(page.locator(".newkey")).to_contain_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == shown
    row = page.locator('#webhooks tr[data-webhook="https://example.test/hook"]')
    expect(row).to_contain_text("batch.completed, response.failed")
    expect(row).to_contain_text("enabled")
    expect(row).to_contain_text("none yet")
    expect(row).to_contain_text(shown[:10])  # the hint the API keeps showing
    s.fits()
    s.shot("webhook-secret")
    [made] = admin.ok("GET", hooks(tid))["data"]
    assert made["event_types"] == ["batch.completed", "response.failed"] and made["enabled"]

    page.reload()  # shown once: not after a reload
    expect(row).to_be_visible()
    expect(page.locator("#new-webhook-secret")).to_have_count(0)
    assert shown not in page.content()


@pytest.mark.parametrize("width", WIDTHS)
def test_webhook_disable_rotate_delete_confirmed(session: Callable[..., Session],
                                                 world: dict[str, Any], width: int):
    admin = world["admin"]
    tid, _ = admin.create_tenant(f"hookc-{uuid.uuid4().hex[:6]}")
    url = "https://example.test/confirm"
    made = admin.ok("POST", hooks(tid), json={"url": url, "event_types": ["batch.failed"]})
    path = f"{hooks(tid)}/{made['id']}"
    s = session(width)
    page = s.go(f"tenants/{tid}")
    row = page.locator(f'#webhooks tr[data-webhook="{url}"]')

    row.get_by_role("button", name="Disable").click()
    confirm(page, accept=False)
    assert admin.ok("GET", path)["enabled"] is True
    row.get_by_role("button", name="Disable").click()
    confirm(page, accept=True)
    expect(row).to_contain_text("disabled")
    assert admin.ok("GET", path)["enabled"] is False
    row.get_by_role("button", name="Enable").click()
    confirm(page, accept=True)
    expect(row.locator(".badge").first).to_have_text("enabled")

    row.get_by_role("button", name="Rotate secret").click()
    s.shot("webhook-confirm-rotate")
    confirm(page, accept=False)
    assert admin.ok("GET", path)["previous_secret_expires_at"] is None
    row.get_by_role("button", name="Rotate secret").click()
    confirm(page, accept=True)
    secret = page.locator("#new-webhook-secret")
    expect(secret).to_have_value(re.compile(r"^whsec_"))
    assert secret.input_value() != made["secret"]
    assert admin.ok("GET", path)["secret_hint"] == secret.input_value()[:10] + "..."

    row.get_by_role("button", name="Delete").click()
    confirm(page, accept=False)
    assert admin.http.get(path).status_code == 200
    row.get_by_role("button", name="Delete").click()
    confirm(page, accept=True)
    expect(row).to_have_count(0)
    expect(page.locator("#webhooks-section")).to_contain_text("No webhook endpoints")
    assert admin.http.get(path).status_code == 404


@pytest.mark.parametrize("width", WIDTHS)
def test_webhook_delivery_log_and_redeliver(session: Callable[..., Session],
                                            world: dict[str, Any], sim_stack: Stack,
                                            width: int):
    """A real batch's batch.completed: delivered, signed, to a receiver that verifies it, and
    retried (error and next retry shown) for an endpoint nobody listens at."""
    admin = world["admin"]
    tid, key = admin.create_tenant(f"hookd-{uuid.uuid4().hex[:6]}")
    receiver = Receiver().start()
    dead = Receiver()  # a free port with nothing listening: connection refused
    try:
        made = admin.ok("POST", hooks(tid), json={"url": receiver.url,
                                                  "event_types": ["batch.completed"]})
        receiver.secrets.append(made["secret"])
        admin.ok("POST", hooks(tid), json={"url": dead.url, "event_types": ["batch.completed"]})
        api = client(sim_stack, key)
        batch = submit(api, jsonl([request_line("r0")]))
        assert wait_status(api, batch.id, {"completed", "failed"}).status == "completed"

        s = session(width)
        page = s.go(f"tenants/{tid}")
        row = page.locator(f'#webhooks tr[data-webhook="{receiver.url}"]')
        expect(row).to_be_visible()
        row.get_by_role("button", name="Deliveries").click()
        log = page.locator("#webhook-deliveries")
        first = log.locator("#deliveries tbody tr").first
        expect(first).to_contain_text("batch.completed", timeout=30000)
        expect(first).to_contain_text(batch.id)
        expect(first.locator(".badge")).to_have_text("delivered", timeout=30000)
        expect(first.locator("td").nth(3)).to_have_text("1")
        expect(first).to_contain_text("HTTP 200")
        s.fits()
        s.shot("webhook-deliveries")

        first.get_by_role("button", name="Redeliver").click()
        expect(page.locator(".notice")).to_contain_text("queued again")
        expect(first.locator("td").nth(3)).to_have_text("2", timeout=30000)
        expect(first.locator(".badge")).to_have_text("delivered")
        assert len(receiver.received) == 2 and receiver.refused == 0
        assert receiver.received[0].event["id"] == receiver.received[1].event["id"]
        page.select_option("#delivery-status", "failed")
        expect(log).to_contain_text("No failed deliveries.")

        # Nobody listens at the other one: pending, its error and its next retry shown.
        other = page.locator(f'#webhooks tr[data-webhook="{dead.url}"]')
        other.get_by_role("button", name="Deliveries").click()
        pending = page.locator("#deliveries tbody tr").first
        expect(pending.locator(".badge")).to_have_text("pending", timeout=30000)
        expect(pending.locator("td").nth(4)).not_to_have_text("—", timeout=30000)
        expect(pending.locator("td").nth(5)).not_to_have_text("—")
        expect(pending.get_by_role("button", name="Redeliver")).to_have_count(0)
        page.reload()
        expect(other).to_contain_text("pending")
        expect(row).to_contain_text("delivered")
        s.shot("webhook-list")
    finally:
        receiver.stop()
