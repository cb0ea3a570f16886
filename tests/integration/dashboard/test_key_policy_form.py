"""A key's policy on the tenant page in headless Chromium at 1280 and 800 px: issued with its
own limits and models, each error beside its field (the page's own checks and the server's
"above the tenant's limit"), shown in the keys table, edited in place, and what the page
shows is what the admin API stores."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.dashboard import CHROMIUM, WIDTHS, Session, expect

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


@pytest.mark.parametrize("width", WIDTHS)
def test_issue_and_edit_a_keys_policy(session: Callable[..., Session], world: dict[str, Any],
                                      width: int):
    admin = world["admin"]
    tid, _ = admin.create_tenant(f"kp-ui-{uuid.uuid4().hex[:6]}")
    admin.set_quotas(tid, requests_per_minute=10)
    s = session(width)
    s.allow(r"status of 400")  # the server's refusal of a limit above the tenant's
    page = s.go(f"tenants/{tid}")
    expect(page.locator('#keys tr[data-key="default"]')).to_contain_text(
        "tenant's limits, every model")

    page.fill("#f-key-name", "limited")
    page.fill("#f-new-requests_per_minute", "many")
    page.click("#issue-key button[type=submit]")
    expect(page.locator("#err-new-requests_per_minute")).to_contain_text("A whole number")
    page.fill("#f-new-requests_per_minute", "50")  # the page allows it; the tenant's is 10
    page.click("#issue-key button[type=submit]")
    expect(page.locator("#err-new-requests_per_minute")).to_contain_text(
        "above the tenant's own limit of 10")
    page.fill("#f-new-requests_per_minute", "5")
    page.fill("#f-new-allowed_models", "sim-model, other-model")
    page.click("#issue-key button[type=submit]")
    expect(page.locator("#new-key-secret")).to_have_value(re.compile(r"^fw-"))
    row = page.locator('#keys tr[data-key="limited"]')
    expect(row).to_contain_text("rpm 5")
    expect(row).to_contain_text("models: sim-model, other-model")

    row.get_by_role("button", name="Edit policy").click()
    form = page.locator("#key-policy-form")
    expect(form).to_be_visible()
    expect(page.locator("#f-edit-requests_per_minute")).to_have_value("5")
    expect(page.locator("#f-edit-allowed_models")).to_have_value("sim-model, other-model")
    page.fill("#f-edit-concurrent_requests", "0")
    page.click("#save-key-policy")
    expect(page.locator("#err-edit-concurrent_requests")).to_contain_text("1 or more")
    s.fits()
    s.shot("key-policy")
    page.fill("#f-edit-concurrent_requests", "2")
    page.fill("#f-edit-allowed_models", "")
    page.click("#save-key-policy")
    expect(form).to_be_hidden()
    expect(row).to_contain_text("rpm 5 · concurrent 2")
    expect(row).not_to_contain_text("models:")

    stored = next(k for k in admin.ok("GET", f"/admin/tenants/{tid}/keys")["data"]
                  if k["name"] == "limited")
    assert (stored["requests_per_minute"], stored["concurrent_requests"],
            stored["allowed_models"]) == (5, 2, None)
    s.fits()
