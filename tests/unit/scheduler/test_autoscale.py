"""The autoscaler's rule: realtime demand and batch backlog against deadlines."""

from __future__ import annotations

import pytest

from scheduler.autoscale import (
    BATCH_DEADLINE,
    IDLE,
    MIN_WORKERS,
    REALTIME,
    WAKE,
    WARM,
    AutoscaleConfig,
    BatchDue,
    Demand,
    batch_work_s,
    desired_workers,
    realtime_busy_s,
)
from scheduler.cost_profiles import H200_LLAMA3_8B

CONFIG = AutoscaleConfig(min_workers=0, max_workers=16, start_delay_s=120.0)
HOUR, WEEK = 3600.0, 7 * 86400.0


def demand(**kw: object) -> Demand:
    base: dict[str, object] = {"model": "m", "live_workers": 1, "slots_per_worker": 256}
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def test_nothing_to_do_is_idle_and_goes_to_min() -> None:
    d = desired_workers(demand(), CONFIG)
    assert (d.workers, d.reason) == (0, IDLE)
    d = desired_workers(demand(), AutoscaleConfig(min_workers=1))
    assert (d.workers, d.reason) == (1, MIN_WORKERS)


def test_realtime_engine_time_sets_the_count() -> None:
    # 2 engine seconds per second at 80% per worker: 2.5 -> 3 workers.
    d = desired_workers(demand(rt_busy_s_per_s=2.0), CONFIG)
    assert (d.workers, d.reason) == (3, REALTIME)
    assert d.realtime_workers == pytest.approx(2.5)


def test_realtime_slots_set_the_count_when_more_than_engine_time() -> None:
    d = desired_workers(demand(rt_inflight=500, rt_waiting=100), CONFIG)
    assert d.workers == 3  # 600 / (256 * 0.8) = 2.9
    assert d.reason == REALTIME


def test_a_predicted_late_first_token_asks_for_one_more() -> None:
    d = desired_workers(demand(live_workers=2, rt_busy_s_per_s=0.3,
                               predicted_ttft_s=0.9, ttft_target_s=1.0), CONFIG)
    assert (d.workers, d.reason) == (3, REALTIME)
    calm = desired_workers(demand(live_workers=2, rt_busy_s_per_s=0.3,
                                  predicted_ttft_s=0.2, ttft_target_s=1.0), CONFIG)
    assert calm.workers == 1


def test_realtime_waiting_with_no_worker_wakes_one() -> None:
    d = desired_workers(demand(live_workers=0, rt_waiting=1), CONFIG)
    assert (d.workers, d.reason) == (1, WAKE)
    # Nothing waits: zero stays zero.
    assert desired_workers(demand(live_workers=0), CONFIG).workers == 0


def test_a_model_at_zero_defers_batch_until_its_deadline_calls() -> None:
    # One worker-hour due in a week: no GPU held for it yet.
    week = desired_workers(demand(live_workers=0, batch_due=(BatchDue(WEEK, HOUR),),
                                  batch_waiting=100), CONFIG)
    assert (week.workers, week.reason) == (0, IDLE)
    # The same hour due in 2.5 h: 1.25 h of work (at 80%) and a 2 min start leave ~70 min,
    # less than the work itself: wake.
    soon = desired_workers(demand(live_workers=0, batch_due=(BatchDue(2.5 * HOUR, HOUR),)),
                           CONFIG)
    assert (soon.workers, soon.reason) == (1, WAKE)
    # Small work close to its deadline wakes within the slack (30 min by default).
    small = desired_workers(demand(live_workers=0, batch_due=(BatchDue(0.5 * HOUR, 10.0),)),
                            CONFIG)
    assert (small.workers, small.reason) == (1, WAKE)
    lax = AutoscaleConfig(min_workers=0, max_workers=16, batch_wake_slack_s=0.0)
    assert desired_workers(demand(live_workers=0, batch_due=(BatchDue(0.5 * HOUR, 10.0),)),
                           lax).workers == 0


def test_a_model_at_zero_wakes_as_many_as_a_due_backlog_needs() -> None:
    d = desired_workers(demand(live_workers=0, batch_due=(BatchDue(HOUR, 20 * HOUR),)), CONFIG)
    assert (d.workers, d.reason) == (16, BATCH_DEADLINE)


def test_recent_traffic_keeps_one_worker_warm_then_it_goes_to_zero() -> None:
    config = AutoscaleConfig(min_workers=0, max_workers=16, idle_after_s=900.0)
    warm = desired_workers(demand(idle_s=600.0), config)
    assert (warm.workers, warm.reason) == (1, WARM)
    idle = desired_workers(demand(idle_s=901.0), config)
    assert (idle.workers, idle.reason) == (0, IDLE)
    # Unknown idleness holds nothing; queued work is not idle whatever the clock says.
    assert desired_workers(demand(), config).workers == 0
    busy = desired_workers(demand(idle_s=5000.0, rt_inflight=3), config)
    assert (busy.workers, busy.reason) == (1, REALTIME)
    with pytest.raises(ValueError):
        AutoscaleConfig(idle_after_s=-1.0)


def test_the_same_backlog_due_in_a_week_needs_few_due_in_an_hour_many() -> None:
    work = 20 * HOUR  # twenty worker-hours of batch
    week = desired_workers(demand(batch_due=(BatchDue(WEEK, work),)), CONFIG)
    hour = desired_workers(demand(batch_due=(BatchDue(HOUR, work),)), CONFIG)
    assert week.workers == 1 and week.reason == BATCH_DEADLINE
    assert hour.workers == 16 and hour.capped and hour.reason == BATCH_DEADLINE
    day = desired_workers(demand(batch_due=(BatchDue(24 * HOUR, work),)), CONFIG)
    assert 1 < day.workers < 16


def test_new_workers_count_only_after_their_start_delay() -> None:
    # 2 live workers; 3 worker-hours due in one hour at full share: the 2 live give 2 h, the
    # rest comes from workers that work 58 minutes of it.
    config = AutoscaleConfig(max_workers=16, start_delay_s=120.0, batch_share=1.0)
    d = desired_workers(demand(live_workers=2, batch_due=(BatchDue(HOUR, 3 * HOUR),)), config)
    n = d.batch_workers
    assert 2 * HOUR + (n - 2) * (HOUR - 120) == pytest.approx(3 * HOUR)
    slow = AutoscaleConfig(max_workers=16, start_delay_s=600.0, batch_share=1.0)
    assert desired_workers(demand(live_workers=2, batch_due=(BatchDue(HOUR, 3 * HOUR),)),
                           slow).batch_workers > n


def test_an_early_deadline_counts_the_work_due_before_a_later_one() -> None:
    # The late deadline alone would need ~1; the early one forces its own work sooner.
    early = BatchDue(2 * HOUR, 6 * HOUR)
    late = BatchDue(12 * HOUR, 1 * HOUR)
    d = desired_workers(demand(batch_due=(late, early)), CONFIG)
    assert d.workers >= 4


def test_realtime_and_batch_add_up() -> None:
    d = desired_workers(demand(rt_busy_s_per_s=0.8, batch_due=(BatchDue(10 * HOUR, 8 * HOUR),)),
                        CONFIG)
    assert d.workers == 2
    assert d.realtime_workers == pytest.approx(1.0)
    assert d.batch_workers == pytest.approx(1.0)


def test_the_bounds_hold() -> None:
    config = AutoscaleConfig(min_workers=2, max_workers=3)
    assert desired_workers(demand(rt_busy_s_per_s=100.0), config).workers == 3
    assert desired_workers(demand(), config).workers == 2
    with pytest.raises(ValueError):
        AutoscaleConfig(min_workers=4, max_workers=3)


def test_work_from_the_cost_profile_is_cheaper_per_token_on_a_full_batch() -> None:
    batch = batch_work_s(H200_LLAMA3_8B, 1000, 250)
    realtime = realtime_busy_s(H200_LLAMA3_8B, 1000, 250)
    assert 0 < batch < realtime
    # On the roofline profile a 1000-token prompt's prefill is 32 ms; 250 tokens of decode
    # at 256 sequences add ~25 ms.
    assert 0.032 < batch < 0.07
