"""Helpers for the dashboard tests (tests/integration/dashboard/): the browser session that
fails on any page or console error and saves screenshots, and small page actions."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.stack import Stack

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
# A busy CI host renders a page's first poll in seconds, not milliseconds: an assertion still
# fails when what it waits for never comes, only later than Playwright's default 5 s.
expect.set_options(timeout=15_000)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTHS = [1280, 800]
TOKEN = "dev-admin-token"


def chat(stack: Stack, key: str) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "sim-model", "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]})


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


def confirm(page: Any, accept: bool) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    buttons = dialog.get_by_role("button")
    (buttons.last if accept else dialog.get_by_role("button", name="Cancel", exact=True)).click()
    expect(dialog).to_be_hidden()


def hooks(tenant_id: str) -> str:
    return f"/admin/tenants/{tenant_id}/webhooks"
