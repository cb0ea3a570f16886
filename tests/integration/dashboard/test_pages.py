"""The admin dashboard in headless Chromium (Debian's chromium, driven by Playwright): every
page with data, empty, loading and error states, the API-down banner, validation errors next
to their field, and confirmation dialogs (cancel, then accept), at 1280 and 800 px wide. Any
JavaScript error on the page or in the console fails the test (a test that provokes an HTTP
error on purpose allows exactly that one message).

Screenshots go to $FAIRWAY_UI_ARTIFACTS (default: under pytest's tmp path). With
$FAIRWAY_UI_SHOTS set to a folder, one screenshot of every page is written there as well."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.dashboard import (
    CHROMIUM,
    TOKEN,
    WIDTHS,
    Session,
    chat,
    confirm,
    expect,
)
from tests.support.stack import Stack

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")



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
    # Per tenant: its realtime requests judged under its plan, and its share and waits.
    mine = page.locator("#tenant-slo tbody tr").filter(has_text=world["name"]).first
    expect(mine).to_contain_text("standard")
    expect(mine).to_contain_text("\u00d7")  # a share ratio, e.g. "1.00x" with a times sign
    expect(page.locator("#page-overview")).to_contain_text("Fairness, realtime")
    s.fits()
    s.shot("overview")

    page = s.go(f"tenants?q={world['name']}")
    row = page.locator(f'#tenants tr[data-tenant="{world["name"]}"]')
    expect(row).to_be_visible()
    expect(page.locator("#tenants tbody tr")).to_have_count(2)  # it and its idle sibling
    expect(page.locator("#tenants thead th").nth(1)).to_have_text("Plan")
    page.select_option('select[aria-label="Plan"]', "free")  # the idle sibling's plan
    expect(page).to_have_url(re.compile(r"plan=free"))
    expect(page.locator("#tenants tbody tr")).to_have_count(1)
    page = s.go(f"tenants?q={world['name']}")
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

    page = s.go("tiers")  # the plans page's first route still leads there
    expect(page).to_have_url(re.compile(r"#/plans$"))
    expect(page.locator("#page-plans h1")).to_have_text("Plans")
    expect(page.locator('nav a[aria-current="page"]')).to_have_text("Plans")
    form = page.locator('form[data-plan="standard"]')
    expect(form.locator('input[name="weight"]')).to_have_value("1")
    expect(form.locator('input[name="ttft_slo_ms"]')).to_have_value("1000")
    assert page.locator("textarea").count() == 0  # fields, not raw JSON
    s.fits()
    s.shot("tiers")  # the file docs/ shows

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


@pytest.mark.parametrize("path, shows", [("audit", "#audit"), ("tenants", "#page-tenants table"),
                                         ("batches", "#page-batches table"),
                                         ("plans", "#page-plans form")])
def test_pages_come_back_by_themselves_after_a_blip(session: Callable[..., Session],
                                                    path: str, shows: str):
    """A page opened while the API is unreachable loads once it is back, with no click."""
    s = session(1280)
    s.allow(r"net::ERR_FAILED")
    page = s.go("overview")
    expect(page.locator("#workers")).to_contain_text("sim-1")
    page.route("**/admin/**", lambda r: r.abort("failed"))
    page = s.go(path)
    expect(page.get_by_role("alert").filter(has_text="unreachable").first).to_be_visible()
    time.sleep(3)  # the blip
    page.unroute("**/admin/**")
    expect(page.locator(shows).first).to_be_visible(timeout=15000)
    expect(page.locator(".state.error")).to_have_count(0)


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
    # The notice covers none of the quota table it reports on (what of it the sticky top bar
    # does not hide already), wherever the table is scrolled to, and a click dismisses it.
    page.locator("#quota-table").evaluate("t => t.scrollIntoView({block: 'end'})")
    notice = page.locator(".notice").bounding_box()
    table = page.locator("#quota-table").bounding_box()
    bar = page.locator("header.top").bounding_box()
    assert notice and table and bar
    below_bar = bar["y"] + bar["height"]
    shown = {**table, "y": max(table["y"], below_bar),
             "height": table["y"] + table["height"] - max(table["y"], below_bar)}
    assert not overlaps(notice, shown), (notice, shown)
    page.locator(".notice").click()
    expect(page.locator(".notice")).to_have_count(0)
    assert admin.quotas(tid)["overrides"] == {"requests_per_minute": 1}
    first, second = chat(sim_stack, key), chat(sim_stack, key)
    assert (first.status_code, second.status_code) == (200, 429)


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    """Two bounding boxes (Playwright's, in the viewport) share some area."""
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])
