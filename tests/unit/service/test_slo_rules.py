"""The one definition of SLO attainment (service.store.telemetry.slo_rules)."""

from __future__ import annotations

import pytest

from service.store.telemetry.slo_rules import SloTargets, judge, tpot_seconds

TARGETS = SloTargets.from_ms(1000, 100)  # standard: 1 s to the first token, 100 ms a token


def test_ttft_and_tpot_are_judged_separately_and_both_is_the_combination():
    fast_start_slow_tokens = judge("realtime", succeeded=True, ttft_s=0.2, e2e_s=0.2 + 4 * 0.3,
                                   completion_tokens=5, targets=TARGETS)
    assert fast_start_slow_tokens == {"ttft": True, "tpot": False, "both": False}
    slow_start_fast_tokens = judge("realtime", succeeded=True, ttft_s=1.5, e2e_s=1.5 + 0.2,
                                   completion_tokens=5, targets=TARGETS)
    assert slow_start_fast_tokens == {"ttft": False, "tpot": True, "both": False}
    assert judge("realtime", succeeded=True, ttft_s=0.5, e2e_s=0.9, completion_tokens=5,
                 targets=TARGETS) == {"ttft": True, "tpot": True, "both": True}


def test_the_boundary_meets_the_target():
    assert judge("realtime", succeeded=True, ttft_s=1.0, e2e_s=1.4, completion_tokens=5,
                 targets=TARGETS) == {"ttft": True, "tpot": True, "both": True}


def test_a_job_that_did_not_succeed_misses_everything():
    assert judge("realtime", succeeded=False, ttft_s=0.1, e2e_s=0.2, completion_tokens=3,
                 targets=TARGETS) == {"ttft": False, "tpot": False, "both": False}
    assert judge("batch", succeeded=False, e2e_s=1, deadline_s=10) == {"deadline": False}


def test_no_first_token_misses_ttft_and_one_token_has_no_tpot_to_miss():
    assert judge("realtime", succeeded=True, ttft_s=None, e2e_s=0.5, completion_tokens=0,
                 targets=TARGETS)["ttft"] is False
    one = judge("realtime", succeeded=True, ttft_s=0.1, e2e_s=9.0, completion_tokens=1,
                targets=TARGETS)
    assert one == {"ttft": True, "tpot": True, "both": True}


def test_batch_class_is_judged_by_its_deadline():
    assert judge("batch", succeeded=True, e2e_s=59, deadline_s=60) == {"deadline": True}
    assert judge("batch", succeeded=True, e2e_s=61, deadline_s=60) == {"deadline": False}
    assert judge("batch", succeeded=True, e2e_s=61, deadline_s=None) == {"deadline": True}


def test_no_target_is_met_by_any_success():
    assert judge("realtime", succeeded=True, ttft_s=99, e2e_s=999, completion_tokens=3,
                 targets=SloTargets(None, None))["both"] is True


@pytest.mark.parametrize(("e2e", "ttft", "tokens", "want"), [
    (1.0, 0.2, 5, 0.2), (1.0, 0.2, 1, None), (1.0, None, 5, None), (None, 0.2, 5, None),
    (0.1, 0.2, 3, 0.0)])
def test_tpot_is_vllms(e2e, ttft, tokens, want):
    got = tpot_seconds(e2e_s=e2e, ttft_s=ttft, completion_tokens=tokens)
    assert got == pytest.approx(want) if want is not None else got is None
