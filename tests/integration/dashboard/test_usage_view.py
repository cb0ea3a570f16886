"""The tenant page's usage charts in headless Chromium at 1280 and 800 px: the last hour per
minute beside the per-UTC-day view, split by model, class and key, and chart time axes in
24-hour time like the rest of the UI."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.dashboard import CHROMIUM, WIDTHS, Session, expect

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


@pytest.mark.parametrize("width", WIDTHS)
def test_last_hour_per_minute(session: Callable[..., Session], world: dict[str, Any],
                              width: int):
    s = session(width)
    page = s.go(f"tenants/{world['id']}")
    charts = page.locator("#usage-charts")
    expect(charts.locator(".uplot")).to_have_count(3)
    expect(page.locator("#usage-totals")).to_contain_text("(UTC days)")
    page.select_option("#usage-period", "hour")
    expect(page.locator('#usage-charts[data-period="hour"] .uplot')).to_have_count(3)
    expect(charts.locator("figcaption").first).to_have_text("Requests per minute")
    expect(charts.locator(".u-legend").first).to_contain_text("sim-model")
    # The world's three requests (and its batch lines, once they ran) are in the last hour.
    totals = page.locator("#usage-totals")
    expect(totals).to_contain_text("(last hour, per minute)")
    expect(totals).to_have_text(re.compile(r"^([3-9]|\d\d+) requests"))
    page.select_option("#usage-group", "key")
    expect(charts.locator(".u-legend").first).to_contain_text("reporting")
    page.select_option("#usage-group", "job_class")
    expect(charts.locator(".u-legend").first).to_contain_text("realtime")
    page.select_option("#usage-group", "model")
    s.fits()
    s.shot("usage-last-hour")


def test_an_idle_tenant_has_an_empty_last_hour(session: Callable[..., Session],
                                              world: dict[str, Any]):
    s = session(1280)
    page = s.go(f"tenants/{world['idle_id']}")
    page.select_option("#usage-period", "hour")
    expect(page.locator("#usage-charts")).to_contain_text("No usage in the last hour.")
    expect(page.locator("#usage-charts .uplot")).to_have_count(0)


def test_time_axes_are_24_hour(session: Callable[..., Session], world: dict[str, Any]):
    s = session(1280)
    page = s.go(f"tenants/{world['id']}")
    expect(page.locator("#usage-charts .uplot").first).to_be_visible()
    # Local 13:00 and 14:00 on 6 Dec, then minutes across midnight, then days.
    labels = page.evaluate("""async () => {
        const { timeLabels } = await import('/admin/ui/js/chart.js');
        const at = (d, h, m) => new Date(2026, 11, d, h, m).getTime() / 1000;
        return [timeLabels([at(6, 13, 0), at(6, 14, 0)], 3600),
                timeLabels([at(6, 23, 58), at(6, 23, 59), at(7, 0, 0)], 60),
                timeLabels([at(6, 0, 0), at(7, 0, 0)], 86400)];
    }""")
    assert labels == [["13:00\n6 Dec", "14:00"], ["23:58\n6 Dec", "23:59", "00:00\n7 Dec"],
                      ["6 Dec", "7 Dec"]]
    assert not any(re.search(r"am|pm", x, re.I) for group in labels for x in group)
    # The legend names the time under the cursor the same way.
    over = page.locator("#usage-charts .u-over").first
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=4)
    when = page.locator("#usage-charts .u-legend").first.locator(".u-series").first
    expect(when).to_contain_text(re.compile(r"\d{1,2} \w{3} \d{4}, \d{2}:\d{2}"))
    assert not re.search(r"am|pm", when.inner_text(), re.I)
