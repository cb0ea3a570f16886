"""The trace -> request mapping of `fairway bench replay` (service/cli/replay/plan.py), on
hand-made trace rows."""

from __future__ import annotations

import pytest

from scheduler.sim.trace import TraceRequest
from service.cli.replay.plan import Entry, build_plan, parse_mix, prompt_text

TRACE = tuple(TraceRequest(at, p, o) for at, p, o in [
    (0.0, 100, 10), (1.0, 500, 200), (2.0, 50, 5), (3.0, 300, 80), (10.0, 20, 2),
    (31.0, 40, 4), (35.0, 60, 6)])
RT = [{"tenant": "rt"}]


def test_window_rate_scale_and_caps() -> None:
    plan = build_plan(TRACE, RT, window=(1.0, 11.0), rate_scale=2.0, max_prompt=256,
                      max_output=64)
    # Trace seconds 1..11 land at (t - 1) / 2 replay seconds; lengths clipped.
    assert [(r.at, r.prompt_tokens, r.output_tokens) for r in plan.realtime] == [
        (0.0, 256, 64), (0.5, 50, 5), (1.0, 256, 64), (4.5, 20, 2)]
    assert plan.duration_s == 5.0
    assert plan.batches == ()


def test_open_window_ends_at_the_last_arrival() -> None:
    plan = build_plan(TRACE, RT, rate_scale=1.0)
    assert len(plan.realtime) == 7 and plan.duration_s == 35.0


def test_batch_lines_become_files_by_submission_interval() -> None:
    mix = [{"tenant": "bulk", "batch": True}]
    plan = build_plan(TRACE, mix, batch_every_s=30.0)
    assert plan.realtime == ()
    assert [(b.tenant, b.at, [r.index for r in b.lines]) for b in plan.batches] == [
        ("bulk", 0.0, [0, 1, 2, 3, 4]), ("bulk", 31.0, [5, 6])]


def test_shares_split_the_requests_and_the_seed_fixes_the_split() -> None:
    mix = [{"share": 3, "tenant": "a"}, {"share": 1, "tenant": "b", "batch": True}]
    many = tuple(TraceRequest(float(i), 10, 1) for i in range(2000))
    plan = build_plan(many, mix)
    lines = sum(len(b.lines) for b in plan.batches)
    assert len(plan.realtime) + lines == 2000
    assert 400 < lines < 600  # a quarter, give or take
    again = build_plan(many, mix)
    assert [r.index for r in again.realtime] == [r.index for r in plan.realtime]
    other = build_plan(many, mix, seed=1)
    assert [r.index for r in other.realtime] != [r.index for r in plan.realtime]


def test_entries_carry_tier_service_tier_and_vllm_priority() -> None:
    [(share, premium), (_, bulk)] = parse_mix([
        {"tenant": "p", "tier": "premium", "service_tier": "priority", "slo_ttft_s": 0.2},
        {"tenant": "b", "batch": True}])
    assert share == 0.5
    assert premium == Entry("p", "premium", "priority", False, 0.2)
    assert premium.priority == 0 and Entry("d").priority == 1
    assert Entry("f", service_tier="flex").priority == 2
    assert bulk.priority == 3


@pytest.mark.parametrize("mix, message", [
    ([], "empty"), ([{"share": 1}], "needs a tenant"),
    ([{"tenant": "a", "service_tier": "gold"}], "unknown service_tier"),
    ([{"tenant": "a", "weight": 2}], "unknown mix key"),
    ([{"tenant": "a", "share": 0}], "more than 0")])
def test_bad_mix_is_a_clear_error(mix: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mix(mix)


def test_prompts_are_distinct_and_sized_in_words() -> None:
    assert len(prompt_text(7, 100).split()) == 99
    assert prompt_text(1, 50).split()[0] == "1:"
    assert prompt_text(1, 50) != prompt_text(2, 50)
