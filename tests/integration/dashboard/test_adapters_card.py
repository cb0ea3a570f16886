"""The "LoRA adapters" card on the tenant page in headless Chromium at 1280 and 800 px: a tenant
with one uploaded adapter, used twice, shows it with its ft: model name, rank, size and use,
its last and median load time (the sim worker's one load) and the worker holding it warm, and
names the load-time metric; a tenant without adapters shows "No adapters"; no JavaScript
error and no page-wide scrolling."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.admin import Admin
from tests.support.dashboard import CHROMIUM, WIDTHS, Session, expect
from tests.support.lora_adapter import adapter_zip
from tests.support.stack import Stack

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")


@pytest.fixture(scope="module")
def adapter_owner(sim_stack: Stack) -> dict[str, Any]:
    """A tenant with one adapter ("support-v2") that served two requests."""
    admin = Admin(sim_stack.base_url)
    tid, key = admin.create_tenant(f"ui-lora-{uuid.uuid4().hex[:6]}")
    auth = {"Authorization": f"Bearer {key}"}
    up = httpx.post(sim_stack.base_url + "/v1/adapters", timeout=60, headers=auth,
                    data={"name": "support-v2", "model": "sim-model"},
                    files={"file": ("adapter.zip", adapter_zip())})
    assert up.status_code == 200, up.text
    adapter = up.json()
    tokens = 0
    for _ in range(2):
        reply = httpx.post(sim_stack.base_url + "/v1/chat/completions", timeout=60,
                           headers=auth, json={"model": adapter["model"], "max_tokens": 4,
                                               "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200, reply.text
        tokens += reply.json()["usage"]["total_tokens"]
    return {"id": tid, "adapter": adapter, "tokens": tokens}


@pytest.mark.parametrize("width", WIDTHS)
def test_the_adapters_card(session: Callable[..., Session], adapter_owner: dict[str, Any],
                           world: dict[str, Any], width: int) -> None:
    s = session(width)
    page = s.go(f"tenants/{adapter_owner['id']}")
    card = page.locator("#tenant-adapters")
    expect(card.get_by_role("heading", name="LoRA adapters")).to_be_visible()
    row = card.locator('#adapters tr[data-adapter="support-v2"]')
    adapter = adapter_owner["adapter"]
    expect(row).to_contain_text(adapter["model"])
    expect(row.locator("td.requests")).to_have_text("2")
    expect(row.locator("td.tokens")).to_have_text(str(adapter_owner["tokens"]))
    expect(row.locator("td.last-used")).not_to_have_text("not in this window")
    # One load of FAIRWAY_SIM_ADAPTER_LOAD_S: last and median alike.
    expect(row.locator("td.load")).to_have_text(re.compile(r"^(\d+\.\d\d) s / \1 s$"))
    expect(row.locator("td.warm-on")).to_have_text("sim-1")
    expect(card.locator("#adapter-load-times")).to_contain_text("fairway_lora_load_seconds")
    s.fits()
    s.shot("tenant-adapters")

    # The world's idle tenant has none.
    page = s.go(f"tenants/{world['idle_id']}")
    expect(page.locator("#tenant-adapters")).to_contain_text("No adapters")
    expect(page.locator("#adapters")).to_have_count(0)
