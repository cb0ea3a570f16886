"""The explorer page in headless Chromium at 1280 and 800 px: a job by its id (deep link),
its timeline bar with each phase, where its time went, its facts and steps in 24-hour UTC with
milliseconds, and the link to its tenant; a batch from the top bar's box with its files, lines
and slowest and failed lines linking to their jobs; an unknown id said so. No JavaScript
error and no page-wide scrolling."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.dashboard import CHROMIUM, WIDTHS, Session, expect
from tests.support.explorer import finished_batch, slow_job

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")
CLOCK = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")


@pytest.fixture(scope="module")
def rows(world: dict[str, Any], sim_stack: Any) -> dict[str, Any]:
    url = sim_stack.database_url
    job = slow_job(url, world["id"], queue_ms=1800, preempted=True)
    batch_id, lines = finished_batch(url, world["id"])
    return {"job": f"job_{job.hex}", "batch": f"batch_{batch_id.hex}",
            "lines": [f"job_{x.hex}" for x in lines]}


@pytest.mark.parametrize("width", WIDTHS)
def test_a_job_by_its_id(session: Callable[..., Session], world: dict[str, Any],
                         rows: dict[str, Any], width: int) -> None:
    s = session(width)
    page = s.go(f"explore/{rows['job']}")
    expect(page.locator("#explore-job")).to_have_attribute("data-job", rows["job"])
    expect(page.locator("#explore-verdict")).to_have_text(
        "First token after 1,880 ms against a 1,000 ms target (missed). Most of its 2,690 ms "
        "was waiting in the queue: 1,880 ms (69%). Preempted 1 time.")
    phases = page.locator("#timeline-bar .phase")
    expect(phases).to_have_count(6)
    assert [phases.nth(i).get_attribute("data-phase") for i in range(6)] == [
        "queued", "decode", "parked", "placed", "prefill", "decode"]
    # The bar is drawn to scale: the queue's 1,880 ms against the parked 500 ms.
    queued, parked = (phases.nth(i).bounding_box() for i in (0, 2))
    assert queued and parked and 3.0 < queued["width"] / parked["width"] < 4.5
    expect(page.locator("#took-queue")).to_contain_text("1,880 ms")
    expect(page.locator("#took-ttft .bad-text")).to_have_text("1,880 ms")
    expect(page.locator("#fact-tokens")).to_contain_text("12 prompt")
    expect(page.locator("#fact-slo")).to_contain_text("standard: TTFT 1,000 ms")
    steps = page.locator("#timeline-steps tbody tr")
    expect(steps).to_have_count(7)
    assert all(CLOCK.match(t) for t in page.locator("#timeline-steps tbody td:first-child")
               .all_inner_texts())
    expect(page.locator('#timeline-steps tr[data-step="preempted"]')) \
        .to_contain_text("mode=recompute")
    s.fits()
    s.shot("explore-job")
    page.click("#fact-tenant a")
    expect(page.locator("#tenant-name")).to_have_text(world["name"])


@pytest.mark.parametrize("width", WIDTHS)
def test_a_batch_from_the_top_bar(session: Callable[..., Session], rows: dict[str, Any],
                                  width: int) -> None:
    s = session(width)
    page = s.go("overview")
    page.fill("#explore-q", f"  {rows['batch']} ")
    page.press("#explore-q", "Enter")
    expect(page).to_have_url(re.compile(f"#/explore/{rows['batch']}$"))
    expect(page.locator("#explore-batch")).to_have_attribute("data-batch", rows["batch"])
    expect(page.locator("#fact-counts")).to_contain_text("3: 2 completed, 1 failed")
    expect(page.locator('#batch-files tr[data-role="input"]')).to_contain_text("1,234 B")
    expect(page.locator('#batch-lines tr[data-status="failed"]')).to_contain_text("1")
    slowest = page.locator("#slowest-lines tbody tr")
    expect(slowest).to_have_count(3)
    expect(slowest.first).to_have_attribute("data-custom-id", "b")
    expect(page.locator("#failed-lines")).to_contain_text("engine_error")
    s.fits()
    s.shot("explore-batch")
    slowest.first.locator("a").click()
    expect(page.locator("#explore-job")).to_have_attribute("data-job", rows["lines"][1])
    expect(page.locator("#fact-batch")).to_contain_text("line 2")
    page.click("#fact-batch a")
    expect(page.locator("#explore-batch")).to_be_visible()


def test_a_custom_id_within_its_batch_and_an_unknown_id(session: Callable[..., Session],
                                                        rows: dict[str, Any]) -> None:
    s = session(1280)
    page = s.go("explore")
    page.fill("#explore-id", "c")
    page.fill("#explore-in-batch", rows["batch"])
    page.click("#explore-form button[type=submit]")
    expect(page.locator("#explore-job")).to_have_attribute("data-job", rows["lines"][2])
    expect(page.locator("#fact-error")).to_contain_text("it broke")
    s.allow("status of 404")
    page = s.go("explore/job_doesnotexist")
    expect(page.locator("#explore-missing")).to_contain_text(
        "No job or batch matches 'job_doesnotexist'")
    page.fill("#explore-q", "req_0a1b2c")
    page.press("#explore-q", "Enter")
    expect(page.locator("#explore-missing")).to_contain_text(
        "fairway logs --request-id req_0a1b2c")


def test_the_batches_page_links_each_batch_to_its_detail(session: Callable[..., Session],
                                                         world: dict[str, Any]) -> None:
    s = session(800)
    page = s.go("batches")
    page.locator(f'#batches tr[data-batch="{world["batch_id"]}"] a[href^="#/explore/"]').click()
    expect(page.locator("#explore-batch")).to_have_attribute("data-batch", world["batch_id"])
    expect(page.locator('#batch-files tr[data-role="input"]')).to_contain_text("in.jsonl")
