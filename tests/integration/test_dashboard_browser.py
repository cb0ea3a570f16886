"""The admin dashboard in headless Chromium (Debian's chromium, driven by Playwright): every
page with data, empty, loading and error states, the API-down banner, validation errors next
to their field, and confirmation dialogs (cancel, then accept), at 1280 and 800 px wide. Any
JavaScript error on the page or in the console fails the test (a test that provokes an HTTP
error on purpose allows exactly that one message).

Screenshots go to $FAIRWAY_UI_ARTIFACTS (default: under pytest's tmp path). With
$FAIRWAY_UI_SHOTS set to a folder, one screenshot of every page is written there as well."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.integration.test_batches import client, jsonl, request_line, submit, wait_status
from tests.support.admin import Admin
from tests.support.stack import Stack
from tests.support.webhook_receiver import Receiver

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTHS = [1280, 800]
TOKEN = "dev-admin-token"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


def chat(stack: Stack, key: str) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "sim-model", "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("FAIRWAY_UI_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("dashboard-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def world(sim_stack: Stack) -> dict[str, Any]:
    """Light data: a tenant with two keys and some usage, and a second, idle one."""
    admin = Admin(sim_stack.base_url)
    name = f"ui-{uuid.uuid4().hex[:6]}"
    tid, key = admin.create_tenant(name)
    second = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "reporting"})
    for k in (key, key, second["key"]):
        assert chat(sim_stack, k).status_code == 200
    idle_id, _ = admin.create_tenant(f"{name}-idle", "free")
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key)
    lines = "\n".join(json.dumps({
        "custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "sim-model", "max_tokens": 4,
                 "messages": [{"role": "user", "content": "hi"}]}}) for i in range(3))
    f = api.files.create(file=("in.jsonl", io.BytesIO(lines.encode())), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    return {"batch_id": batch.id, "admin": admin, "name": name, "id": tid, "key": key,
            "idle_id": idle_id, "idle_name": f"{name}-idle", "base": sim_stack.base_url}


class Session:
    """One page at one width, collecting every JavaScript error."""

    def __init__(self, browser: Any, base: str, width: int, shots: Path, *, login: bool = True):
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        if login:
            self.context.add_init_script(
                f"sessionStorage.setItem('fairway-admin-token', {json.dumps(TOKEN)})")
        self.page = self.context.new_page()
        self.base, self.width, self.shots = base, width, shots
        self.errors: list[str] = []
        self.allowed: list[re.Pattern[str]] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("response", self._failed_response)

    def _failed_response(self, response: Any) -> None:
        """Which request a "Failed to load resource" line was about (Chromium omits it)."""
        if response.status >= 500 and not any(p.search(f"status of {response.status}")
                                              for p in self.allowed):
            try:
                body = response.text()[:300]
            except Exception:  # the body may be gone; the URL is what matters
                body = ""
            self.errors.append(f"HTTP {response.status} {response.url} {body}")

    def allow(self, pattern: str) -> None:
        """A console error this test causes on purpose (Chromium logs failed loads)."""
        self.allowed.append(re.compile(pattern))

    def go(self, route: str) -> Any:
        self.page.goto(f"{self.base}/admin/ui/#/{route}")
        return self.page

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}-{self.width}.png"), full_page=True)
        lead = os.environ.get("FAIRWAY_UI_SHOTS")
        if lead:
            Path(lead).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(lead) / f"{name}-{self.width}.png"), full_page=True)

    def fits(self) -> None:
        """No page-wide horizontal scrolling (wide tables scroll inside their card)."""
        width = self.page.evaluate("document.documentElement.scrollWidth")
        wide = self.page.evaluate(f"""() => [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > {self.width}).slice(-6)
            .map(e => `${{e.tagName}}.${{e.className}}
                       ${{Math.round(e.getBoundingClientRect().right)}}`)""")
        assert width <= self.width, f"page is {width} px wide at {self.width}: {wide}"

    def close(self) -> None:
        self.context.close()
        unexpected = [e for e in self.errors if not any(p.search(e) for p in self.allowed)]
        assert unexpected == [], unexpected


@pytest.fixture
def session(browser: Any, world: dict[str, Any], artifacts: Path
            ) -> Iterator[Callable[..., Session]]:
    opened: list[Session] = []

    def open_session(width: int, **kw: Any) -> Session:
        s = Session(browser, world["base"], width, artifacts, **kw)
        opened.append(s)
        return s

    yield open_session
    for s in opened:
        s.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_login_refused_then_accepted(session: Callable[..., Session], width: int):
    s = session(width, login=False)
    page = s.go("overview")
    page.fill("#token", "wrong-token")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_contain_text("Login failed")
    s.allow(r"status of 403")  # the refused login, on purpose
    s.shot("login")
    page.fill("#token", TOKEN)
    page.click("#login-form button")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_with_data(session: Callable[..., Session], world: dict[str, Any],
                              width: int):
    s = session(width)
    page = s.go("overview")
    expect(page.locator("#workers")).to_contain_text("sim-1")
    expect(page.locator("#page-overview .chart .uplot").first).to_be_visible()
    expect(page.locator("#page-overview")).to_contain_text("TTFT p99")
    expect(page.locator("#page-overview")).to_contain_text("standard target")
    s.fits()
    s.shot("overview")

    page = s.go(f"tenants?q={world['name']}")
    row = page.locator(f'#tenants tr[data-tenant="{world["name"]}"]')
    expect(row).to_be_visible()
    expect(page.locator("#tenants tbody tr")).to_have_count(2)  # it and its idle sibling
    s.fits()
    s.shot("tenants")
    row.get_by_role("link", name="Manage").click()
    expect(page).to_have_url(re.compile(f"#/tenants/{world['id']}$"))
    name = page.locator("#tenant-name")
    expect(name).to_have_text(world["name"])
    box = name.bounding_box()
    assert box is not None and box["y"] < 300  # Manage opens the view at its top
    expect(page.locator("#quota-table")).to_contain_text("Requests per minute")
    # Rate-limit status: each limited row gauges its live use against the effective limit.
    rpm = page.locator("#quota-table tbody tr").first
    effective = rpm.locator("td").nth(3).inner_text()
    expect(rpm.locator(".quota-now em")).to_have_text(re.compile(rf"^\d[\d,]* / {effective}$"))
    keys = page.locator("#keys")
    expect(keys.locator('tr[data-key="reporting"]')).to_contain_text("1")
    expect(keys.locator('tr[data-key="default"] td').nth(6)).to_have_text("2")
    expect(page.locator("#usage-charts .uplot")).to_have_count(3)
    expect(page.locator("#usage-charts .u-legend").first).to_contain_text("sim-model")
    page.select_option("#usage-group", "key")
    expect(page.locator("#usage-charts .u-legend").first).to_contain_text("reporting")
    s.fits()
    s.shot("tenant")

    page = s.go("tiers")
    form = page.locator('form[data-tier="standard"]')
    expect(form.locator('input[name="weight"]')).to_have_value("1")
    expect(form.locator('input[name="ttft_slo_ms"]')).to_have_value("1000")
    assert page.locator("textarea").count() == 0  # fields, not raw JSON
    s.fits()
    s.shot("tiers")

    page = s.go(f"audit?target={world['id']}")
    audit = page.locator("#audit")
    expect(audit).to_contain_text(world["name"])
    expect(audit).to_contain_text("reporting")  # the key's name, not its id
    expect(audit).not_to_contain_text(world["id"])
    s.fits()
    s.shot("audit")

    page = s.go("batches")
    row = page.locator(f'#batches tr[data-batch="{world["batch_id"]}"]')
    expect(row).to_contain_text(world["name"])
    expect(row.get_by_role("progressbar")).to_contain_text("/ 3")
    s.fits()
    s.shot("batches")


@pytest.mark.parametrize("width", WIDTHS)
def test_audit_pages(session: Callable[..., Session], world: dict[str, Any], width: int):
    admin = world["admin"]
    for n in range(30):
        admin.set_quotas(world["idle_id"], tokens_per_minute=1000 + n)
    s = session(width)
    page = s.go(f"audit?target={world['idle_id']}")
    expect(page.locator(".pager")).to_contain_text("Page 1 of")
    first = page.locator("#audit tbody tr").first.inner_text()
    page.get_by_role("button", name=re.compile("^Next")).click()
    expect(page.locator(".pager")).to_contain_text("Page 2 of")
    expect(page.locator("#audit tbody tr").first).not_to_have_text(first)
    page.select_option("#audit-action", "tenant.")
    expect(page.locator("#audit tbody tr")).to_have_count(1)  # its create
    expect(page.locator("#audit")).to_contain_text("tenant.create")


@pytest.mark.parametrize("width", WIDTHS)
def test_empty_loading_and_error_states(session: Callable[..., Session],
                                        world: dict[str, Any], width: int):
    s = session(width)
    page = s.go(f"tenants/{world['idle_id']}")
    expect(page.locator("#usage-charts")).to_contain_text("No usage in the last 30 days")
    expect(page.locator("#usage-charts .uplot")).to_have_count(0)
    page = s.go(f"batches?tenant={world['idle_id']}")
    expect(page.locator("#page-batches")).to_contain_text("No batch matches these filters")
    page = s.go("tenants?q=no-such-tenant-anywhere")
    expect(page.locator("#page-tenants")).to_contain_text("No tenant matches these filters")
    s.shot("empty")

    def slow(route: Any) -> None:
        time.sleep(1.5)
        route.continue_()

    page.route("**/admin/queues", slow)
    page = s.go("overview")
    expect(page.get_by_role("status").filter(has_text="Loading the overview")).to_be_visible()
    s.shot("loading")
    expect(page.locator("#workers")).to_be_visible(timeout=15000)
    page.unroute("**/admin/queues")

    page.route("**/admin/audit?*", lambda r: r.fulfill(status=500, content_type="application/json",
               body=json.dumps({"error": {"message": "Internal server error",
                                          "type": "api_error", "param": None,
                                          "code": "internal_error"}})))
    s.allow(r"status of 500")
    page = s.go("audit")
    expect(page.get_by_role("alert")).to_contain_text("Internal server error")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()
    s.shot("error")


@pytest.mark.parametrize("width", WIDTHS)
def test_api_down_banner_without_stale_live_data(session: Callable[..., Session], width: int):
    s = session(width)
    page = s.go("overview")
    expect(page.locator("#workers")).to_contain_text("sim-1")
    expect(page.locator(".updated")).to_contain_text("live")
    s.allow(r"net::ERR_FAILED")  # Chromium's log line for each aborted request
    page.route("**/admin/**", lambda r: r.abort("failed"))
    banner = page.locator("#api-down")
    expect(banner).to_be_visible(timeout=15000)
    expect(banner).to_contain_text("unreachable")
    expect(page.locator(".stale-note")).to_contain_text("Not live")
    expect(page.locator(".updated")).not_to_contain_text("live")
    s.shot("api-down")
    page.unroute("**/admin/**")
    expect(banner).to_be_hidden(timeout=30000)
    expect(page.locator(".stale-note")).to_have_count(0)


@pytest.mark.parametrize("width", WIDTHS)
def test_quota_form_validates_and_shows_server_errors(
        session: Callable[..., Session], world: dict[str, Any], sim_stack: Stack, width: int):
    admin = world["admin"]
    tid, key = admin.create_tenant(f"quota-{uuid.uuid4().hex[:6]}")
    s = session(width)
    page = s.go(f"tenants/{tid}")
    puts: list[str] = []
    page.on("request", lambda r: puts.append(r.url) if r.method == "PUT" else None)
    page.fill("#f-requests_per_minute", "-3")
    page.fill("#f-monthly_alert_percent", "150")
    page.click("#save-quotas")
    expect(page.locator("#err-requests_per_minute")).to_have_text("A whole number, or unlimited.")
    expect(page.locator("#err-monthly_alert_percent")).to_have_text("Between 1 and 100.")
    assert puts == []  # nothing sent while the page's own check fails
    s.shot("quota-invalid")

    # The server's OpenAI-shaped error lands next to the field its `param` names.
    page.route("**/quotas", lambda r: r.fulfill(status=400, content_type="application/json",
               body=json.dumps({"error": {"message": "tokens_per_minute: too low for a tier",
                                          "type": "invalid_request_error", "code": "invalid_value",
                                          "param": "overrides.tokens_per_minute"}}))
               if r.request.method == "PUT" else r.continue_())
    s.allow(r"status of 400")
    page.fill("#f-requests_per_minute", "1")
    page.fill("#f-monthly_alert_percent", "")
    page.fill("#f-tokens_per_minute", "5")
    page.click("#save-quotas")
    confirm(page, accept=True)
    expect(page.locator("#err-tokens_per_minute")).to_have_text(
        "tokens_per_minute: too low for a tier")
    expect(page.locator(".notice.error")).to_have_count(0)  # shown at the field, not twice
    page.unroute("**/quotas")

    # Saving changes the tenant's service: confirmed, the change listed; nothing sent on cancel.
    page.fill("#f-tokens_per_minute", "")
    sent = len(puts)
    page.click("#save-quotas")
    expect(page.get_by_role("dialog")).to_contain_text("Requests per minute: inherit → 1")
    s.shot("confirm-quotas")
    confirm(page, accept=False)
    assert len(puts) == sent and admin.quotas(tid)["overrides"] == {}
    page.click("#save-quotas")
    confirm(page, accept=True)
    expect(page.locator(".notice")).to_contain_text("Quotas saved")
    assert admin.quotas(tid)["overrides"] == {"requests_per_minute": 1}
    first, second = chat(sim_stack, key), chat(sim_stack, key)
    assert (first.status_code, second.status_code) == (200, 429)


def confirm(page: Any, accept: bool) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    buttons = dialog.get_by_role("button")
    (buttons.last if accept else dialog.get_by_role("button", name="Cancel", exact=True)).click()
    expect(dialog).to_be_hidden()


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

    page.select_option("#tenant-tier", "premium")
    page.click("#change-tier")
    confirm(page, accept=False)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["tier"] == "standard"
    page.select_option("#tenant-tier", "premium")
    page.click("#change-tier")
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
    page.click("#delete-tenant")
    confirm(page, accept=True)
    expect(page).to_have_url(re.compile(r"#/tenants$"))
    assert admin.http.get(f"/admin/tenants/{tid}").status_code == 404


@pytest.mark.parametrize("width", WIDTHS)
def test_tier_save_confirms_reweighting(session: Callable[..., Session], world: dict[str, Any],
                                        width: int):
    admin = world["admin"]
    tier = f"t{uuid.uuid4().hex[:6]}"
    body = {"weight": 1.5, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": 900,
            "tpot_slo_ms": 90,
            "quotas": {"requests_per_minute": 100, "tokens_per_minute": "unlimited",
                       "concurrent_requests": "unlimited", "batch_enqueued_tokens": "unlimited",
                       "monthly_tokens": "unlimited", "monthly_alert_percent": 80}}
    admin.ok("PUT", f"/admin/tiers/{tier}", json=body)
    tid, _ = admin.create_tenant(f"tier-{uuid.uuid4().hex[:6]}", tier)
    s = session(width)
    page = s.go("tiers")
    form = page.locator(f'form[data-tier="{tier}"]')
    form.locator('input[name="weight"]').fill("0")
    form.get_by_role("button", name="Save").click()
    expect(form.locator(".field-error")).to_contain_text("above 0")
    form.locator('input[name="weight"]').fill("3")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_role("dialog")).to_contain_text("from 1.5 to 3")
    confirm(page, accept=False)
    assert admin.ok("GET", f"/admin/tenants/{tid}")["weight"] == 1.5
    form.get_by_role("button", name="Save").click()
    confirm(page, accept=True)
    expect(page.locator(".notice")).to_contain_text(f"Tier {tier} saved")
    assert admin.ok("GET", f"/admin/tenants/{tid}")["weight"] == 3
    admin.ok("DELETE", f"/admin/tenants/{tid}")
    admin.ok("DELETE", f"/admin/tiers/{tier}")


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
        else:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(
                {"object": "list", "total": 1, "limit": 25, "offset": 0, "data": [fake]}))

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


def hooks(tenant_id: str) -> str:
    return f"/admin/tenants/{tenant_id}/webhooks"


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
    expect(boxes).to_have_count(8)
    for t in ("batch.completed", "batch.cancelled", "response.incomplete", "response.failed"):
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
