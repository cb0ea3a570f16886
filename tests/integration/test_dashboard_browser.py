"""The admin dashboard in headless Chromium (Debian's chromium, driven by Playwright):
log in, lower a tenant's quota, and see the tenant's next API call refused."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.admin import Admin
from tests.support.stack import Stack

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


def chat(stack: Stack, key: str) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "sim-model", "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]})


def test_dashboard_quota_change_takes_effect(sim_stack: Stack):
    admin = Admin(sim_stack.base_url)
    name = f"ui-{uuid.uuid4().hex[:8]}"
    tenant_id, key = admin.create_tenant(name)
    assert chat(sim_stack, key).status_code == 200  # some usage for the chart
    ARTIFACTS.mkdir(exist_ok=True)
    console_errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.on("console", lambda m: console_errors.append(m.text)
                    if m.type == "error" else None)
            page.goto(sim_stack.base_url + "/admin/ui/")
            page.fill("#token", "wrong-token")
            page.click("#login-form button")
            sync_api.expect(page.locator("#login-error")).to_contain_text("Login failed")
            console_errors.clear()  # the refused login logs a 403 on purpose

            page.fill("#token", "dev-admin-token")
            page.click("#login-form button")
            row = page.locator(f'#tenants tr[data-tenant="{name}"]')
            sync_api.expect(row).to_be_visible()
            row.get_by_role("button", name="Manage").click()
            sync_api.expect(page.locator("#tenant-name")).to_have_text(name)
            sync_api.expect(page.locator("#usage-chart svg rect.completion")).to_have_count(30)

            page.fill("#quota-requests_per_minute", "1")
            page.click("#save-quotas")
            sync_api.expect(page.locator("#flash")).to_have_text("Quotas saved")
            sync_api.expect(page.locator("#quota-table")).to_contain_text("requests_per_minute")
            sync_api.expect(page.locator("#workers")).to_contain_text("sim-1")

            # The tenant's next calls: the bucket holds one request, the second is refused.
            first, second = chat(sim_stack, key), chat(sim_stack, key)
            assert first.status_code == 200
            assert second.status_code == 429
            assert second.json()["error"]["code"] == "rate_limit_exceeded"
            assert int(second.headers["Retry-After"]) >= 1

            sync_api.expect(page.locator("#audit")).to_contain_text("quota.update")
            page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert admin.quotas(tenant_id)["overrides"] == {"requests_per_minute": 1}
    assert console_errors == []
