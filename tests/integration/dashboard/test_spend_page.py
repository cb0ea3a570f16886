"""The Spend page and a tenant's spend and budget card in headless Chromium at 1280 and 800
px: spend by tenant and model with a cost chart, the CSV export, a price set from the form
(its errors beside the field first), and a budget with a hard stop (confirmed), with no
JavaScript error and no page-wide scrolling."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.admin import Admin
from tests.support.dashboard import CHROMIUM, WIDTHS, Session, confirm, expect
from tests.support.spend import ended_job, first_key
from tests.support.stack import Stack

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")
M = 1_000_000


@pytest.fixture(scope="module")
def spender(sim_stack: Stack) -> dict[str, Any]:
    """A tenant that spent 12.50 this month on a priced model, by key and by batch."""
    admin = Admin(sim_stack.base_url)
    name = f"ui-spend-{uuid.uuid4().hex[:6]}"
    tid, _ = admin.create_tenant(name)
    model = f"ui-model-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", "/admin/prices", json={"model": model, "input_per_mtok": "2.5",
                                           "output_per_mtok": "10"})
    url = sim_stack.database_url
    ended_job(url, tid, model, prompt_tokens=M, completion_tokens=M // 2,
              key_id=first_key(url, tid))  # 7.50
    ended_job(url, tid, model, prompt_tokens=0, completion_tokens=M, kind="batch")  # 5.00
    return {"id": tid, "name": name, "model": model}


@pytest.mark.parametrize("width", WIDTHS)
def test_the_spend_page(session: Callable[..., Session], spender: dict[str, Any],
                        width: int) -> None:
    s = session(width)
    page = s.go("spend")
    row = page.locator(f'#spend-table tr:has(a:text-is("{spender["name"]}"))')
    expect(row.locator("td.cost")).to_have_text("12.50 USD")
    expect(page.locator("#page-spend .chart .uplot")).to_be_visible()
    expect(page.locator("#prices")).to_contain_text(spender["model"])
    expect(page.locator('#prices tr[data-model="sim-model"]')).to_contain_text("unpriced")
    s.fits()
    s.shot("spend")

    page.select_option("#spend-by", "model")
    expect(page).to_have_url(re.compile(r"by=model"))
    expect(page.locator(f'#spend-table tr[data-row="{spender["model"]}"] td.cost')) \
        .to_have_text("12.50 USD")
    with page.expect_download() as download:
        page.click("#export-csv")
    text = Path(download.value.path()).read_text()
    assert text.startswith("day,tenant_id,tenant,key_id,key,model,job_class")
    assert spender["model"] in text and "7.500000" in text and "5.000000" in text

    model = f"ui-new-{width}-{uuid.uuid4().hex[:6]}"
    page.fill("#f-price-model", model)
    page.fill("#f-price-input_per_mtok", "cheap")
    page.fill("#f-price-output_per_mtok", "0.6")
    page.click("#price-form button[type=submit]")
    expect(page.locator("#err-price-input_per_mtok")).to_contain_text("An amount")
    page.fill("#f-price-input_per_mtok", "0.15")
    page.click("#price-form button[type=submit]")
    new = page.locator(f'#prices tr[data-model="{model}"]')
    expect(new).to_contain_text("0.15 / 0.60")  # realtime
    expect(new).to_contain_text("0.075 / 0.30")  # batch at 50% off, not rounded
    new.get_by_role("button", name="Unprice").click()
    confirm(page, accept=True)
    expect(new).to_contain_text("unpriced")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_tenants_spend_and_budget(session: Callable[..., Session], spender: dict[str, Any],
                                    width: int) -> None:
    s = session(width)
    page = s.go(f"tenants/{spender['id']}")
    card = page.locator("#tenant-spend")
    expect(card.locator("#budget-status")).to_contain_text("12.50 USD spent")
    expect(card.locator("#spend-by-key")).to_contain_text("default")
    expect(card.locator("#spend-by-key")).to_contain_text("(batch lines, no key)")
    expect(card.locator("#spend-by-model td.cost")).to_have_text("12.50 USD")
    page.fill("#f-budget-limit", "-5")
    page.click("#budget-form button[type=submit]")
    expect(page.locator("#err-budget-limit")).to_contain_text("An amount")
    page.fill("#f-budget-limit", "10")
    page.check("#f-budget-hard-stop")
    page.click("#budget-form button[type=submit]")
    confirm(page, accept=False)  # called off: nothing saved
    expect(card.locator("#budget-status")).to_contain_text("no budget")
    page.click("#budget-form button[type=submit]")
    confirm(page, accept=True)
    expect(card.locator("#budget-status")).to_contain_text("of 10.00 USD (125.00%)")
    expect(card.locator("#budget-status")).to_contain_text("stopped: requests refused")
    s.fits()
    s.shot("tenant-spend")
    card.get_by_role("button", name="Remove").click()
    confirm(page, accept=True)
    expect(card.locator("#budget-status")).to_contain_text("no budget")
