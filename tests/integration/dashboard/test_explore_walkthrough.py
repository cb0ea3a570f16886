"""The explorer's walk-through, timed: a tenant's request is made slow for real on the sim
stack (sent right after a burst of the same tenant's long requests that fills the engine's
slots), then an operator who has only its id answers "why was it slow?" on the dashboard:
paste the id into the top bar's box, press Enter, read the answer. The clicks and the seconds
from pasting to the answer on screen are printed (docs/dashboard.md, "Explore a job")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.support.admin import NO_LIMITS, Admin
from tests.support.dashboard import CHROMIUM, Session, expect
from tests.support.stack import Stack

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")
BURST = 16  # twice the test stack's engine slots (FAIRWAY_MAX_NUM_SEQS=8)
LONG_TOKENS = 60


@pytest.fixture(scope="module")
def slow_request(sim_stack: Stack) -> dict[str, Any]:
    admin = Admin(sim_stack.base_url)
    name = f"walk-{uuid.uuid4().hex[:6]}"
    tid, key = admin.create_tenant(name)
    admin.set_quotas(tid, **NO_LIMITS)
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=300)

    def ask(tokens: int) -> Any:
        return api.chat.completions.create(
            model="sim-model", max_tokens=tokens, extra_body={"ignore_eos": True},
            messages=[{"role": "user", "content": "a long answer, please"}])

    with ThreadPoolExecutor(BURST + 1) as pool:
        burst = [pool.submit(ask, LONG_TOKENS) for _ in range(BURST)]
        time.sleep(1.0)  # the burst is in: the slots are full and its rest is queued
        answer = pool.submit(ask, 8).result()
        for f in burst:
            f.result()
    return {"tenant": name, "id": answer.id}


def test_why_was_this_request_slow_from_its_id_alone(session: Callable[..., Session],
                                                     slow_request: dict[str, Any]) -> None:
    s = session(1280)
    page = s.go("overview")
    expect(page.locator("#explore-q")).to_be_visible()
    clicks = 0
    started = time.perf_counter()
    page.click("#explore-q")  # the one click: into the box; the rest is the keyboard
    clicks += 1
    page.fill("#explore-q", slow_request["id"])  # the paste
    page.press("#explore-q", "Enter")
    verdict = page.locator("#explore-verdict")
    expect(verdict).to_contain_text("waiting in the queue", timeout=10_000)
    seconds = time.perf_counter() - started
    expect(page.locator("#fact-tenant")).to_contain_text(slow_request["tenant"])
    expect(page.locator('#timeline-bar .phase[data-phase="queued"]')).to_be_visible()
    queue_ms = int(page.locator("#took-queue").inner_text().split()[-2].replace(",", ""))
    print(f"\nwalk-through: {clicks} click, {seconds:.2f} s from paste to answer; "
          f"{slow_request['id']}: {verdict.inner_text()} (queue wait {queue_ms:,} ms)")
    assert clicks == 1 and seconds < 5
    assert queue_ms > 1000
    s.shot("explore-walkthrough")
