"""The dispatcher's autoscaling inputs (rows and outlooks to demands) and their gauges."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from scheduler.autoscale import AutoscaleConfig, BatchDue, Demand, desired_workers
from scheduler.cost_profiles import H200_LLAMA3_8B
from scheduler.dispatcher import metrics as dm
from scheduler.dispatcher.autoscale_feed import (
    RECENT_S,
    Idleness,
    OpenRow,
    Reader,
    RecentRow,
    demands,
)
from scheduler.outlook import RealtimeOutlook
from service.store.telemetry import metrics as m

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def outlook(model: str, workers: int = 1, rt_load: int = 0, rt_queued: int = 0
            ) -> RealtimeOutlook:
    return RealtimeOutlook(model, 0.0, workers, 256 * workers, rt_load, 0, 1000.0, 2.0,
                           0.01, 3.2e-5, 0.005, 8192, rt_queued=rt_queued)


def test_batch_rows_become_work_due_by_their_deadlines() -> None:
    rows = [OpenRow("m", "batch", True, NOW + dt.timedelta(hours=1), 1000, 1_000_000, 250_000),
            OpenRow("m", "batch", True, NOW + dt.timedelta(days=7), 1000, 1_000_000, 250_000)]
    [d] = demands(rows, [], [outlook("m")], {}, now=NOW, ttft_target_s=1.0,
                  default_cost=H200_LLAMA3_8B)
    assert [b.due_in_s for b in d.batch_due] == [3600.0, 7 * 86400.0]
    assert d.batch_waiting == 2000
    assert d.batch_due[0].work_s == pytest.approx(d.batch_due[1].work_s)
    assert d.batch_due[0].work_s > 30  # a thousand 1000-token prompts: 32 s of prefill alone


def test_recent_batch_output_scales_the_asked_tokens() -> None:
    rows = [OpenRow("m", "batch", True, NOW + dt.timedelta(hours=1), 100, 0, 100_000)]
    full = demands(rows, [], [], {}, now=NOW, ttft_target_s=1.0)[0].batch_due[0].work_s
    recent = [RecentRow("m", "batch", 10, 0, 250, 1000)]  # a quarter of max_tokens came
    quarter = demands(rows, recent, [], {}, now=NOW, ttft_target_s=1.0)[0].batch_due[0].work_s
    assert quarter < full / 2


def test_realtime_rate_slots_and_prediction_come_from_the_policy_and_ended_jobs() -> None:
    recent = [RecentRow("m", "realtime", 600, 600_000, 150_000, 300_000)]
    o = outlook("m", workers=2, rt_load=30, rt_queued=5)
    [d] = demands([], recent, [o], {}, now=NOW, ttft_target_s=1.0)
    assert d.live_workers == 2 and d.slots_per_worker == 256
    assert (d.rt_inflight, d.rt_waiting) == (25, 5)
    assert d.rt_busy_s_per_s == pytest.approx(
        (600_000 * 3.2e-5 + 150_000 * H200_LLAMA3_8B.step_s(128, 128 * 1024, 0) / 128) / RECENT_S)
    assert d.predicted_ttft_s is not None and d.predicted_ttft_s > 0


def test_realtime_queued_for_a_model_without_workers_wakes_one() -> None:
    rows = [OpenRow("cold", "realtime", True, NOW, 1, 100, 64)]
    [d] = demands(rows, [], [], {}, now=NOW, ttft_target_s=1.0, models=["cold"])
    assert d.live_workers == 0 and d.rt_waiting == 1
    decided = desired_workers(d, AutoscaleConfig())
    assert (decided.workers, decided.reason) == (1, "wake")


def test_desired_workers_gauge_keeps_one_series_per_model() -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    value = m.REGISTRY.get_sample_value
    config = AutoscaleConfig()
    [wake] = [desired_workers(d, config) for d in demands(
        [OpenRow(model, "realtime", True, NOW, 1, 100, 64)], [], [], {}, now=NOW,
        ttft_target_s=1.0)]
    dm.set_desired([wake])
    assert value("fairway_desired_workers", {"model_name": model, "reason": "wake"}) == 1
    [idle] = [desired_workers(d, config) for d in demands(
        [], [], [], {}, now=NOW, ttft_target_s=1.0, models=[model])]
    dm.set_desired([idle])
    assert value("fairway_desired_workers", {"model_name": model, "reason": "wake"}) is None
    assert value("fairway_desired_workers", {"model_name": model, "reason": "idle"}) == 0
    assert value("fairway_autoscale_batch_workers", {"model_name": model}) == 0


class FakeSession:
    """Answers the feed's three reads and counts them."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def execute(self, statement: object, params: object = None) -> list[tuple[object, ...]]:
        sql = str(statement)
        self.reads.append(sql)
        if "kind = 'batch'" in sql:
            return [("m", True, NOW + dt.timedelta(hours=2), 10, 1000, 2000)]
        if "kind = 'realtime'" in sql:
            return [("m", 3)]
        return []


def test_the_backlog_is_read_every_batch_refresh_and_kept_between() -> None:
    reader = Reader(batch_every_s=30.0)
    session = FakeSession()
    rows, _ = reader.read(session, now=NOW, clock=100.0)  # type: ignore[arg-type]
    assert {(r.kind, r.jobs) for r in rows} == {("batch", 10), ("realtime", 3)}
    rows, _ = reader.read(session, now=NOW, clock=110.0)  # type: ignore[arg-type]
    assert {(r.kind, r.jobs) for r in rows} == {("batch", 10), ("realtime", 3)}
    assert sum("kind = 'batch'" in sql for sql in session.reads) == 1
    reader.read(session, now=NOW, clock=131.0)  # type: ignore[arg-type]
    assert sum("kind = 'batch'" in sql for sql in session.reads) == 2


def test_idleness_counts_from_the_last_traffic_or_the_first_read() -> None:
    idle = Idleness()
    quiet = Demand("m", live_workers=1, slots_per_worker=8)
    assert idle.note(quiet, recent=False, clock=100.0).idle_s == 0.0  # counts from now
    assert idle.note(quiet, recent=False, clock=400.0).idle_s == 300.0
    busy = Demand("m", live_workers=1, slots_per_worker=8, rt_inflight=1)
    assert idle.note(busy, recent=False, clock=500.0).idle_s == 0.0
    assert idle.note(quiet, recent=True, clock=550.0).idle_s == 0.0  # ended in the last minute
    assert idle.note(quiet, recent=False, clock=1600.0).idle_s == 1050.0
    # Batch work is no traffic: its deadline, not the idle period, says when it needs a worker.
    backlog = Demand("m", live_workers=0, slots_per_worker=8,
                     batch_due=(BatchDue(7 * 86400.0, 60.0),), batch_waiting=10)
    assert idle.note(backlog, recent=False, clock=1600.0).idle_s == 1050.0
    # Past the idle period with nothing queued the model asks for zero, before it for one.
    config = AutoscaleConfig(idle_after_s=900.0)
    assert desired_workers(idle.note(quiet, recent=False, clock=1000.0), config).workers == 1
    assert desired_workers(idle.note(quiet, recent=False, clock=1600.0), config).workers == 0


def test_each_model_counts_its_own_profile_s_worker_start() -> None:
    # The same small batch due in ~33 minutes at zero workers: a model whose workers start in
    # a minute can wait for it, one whose workers take half an hour must wake now.
    from dataclasses import replace
    from types import SimpleNamespace

    from scheduler.dispatcher.autoscale_feed import decide

    due = NOW + dt.timedelta(seconds=2000)

    class Rows:
        def execute(self, statement: object, params: object = None) -> list[tuple[object, ...]]:
            if "kind = 'batch'" in str(statement):
                return [("quick", True, due, 10, 100, 50), ("slow", True, due, 10, 100, 50)]
            return []

    pools = {"quick": SimpleNamespace(cost=replace(H200_LLAMA3_8B, start_s=60.0)),
             "slow": SimpleNamespace(cost=replace(H200_LLAMA3_8B, start_s=1800.0))}
    policy = SimpleNamespace(outlook=lambda now: [], fleet=SimpleNamespace(pools=pools))
    decided = decide(policy, Rows(), Reader(), now_epoch=NOW.timestamp(),  # type: ignore[arg-type]
                     clock=0.0, models=[], config=AutoscaleConfig())
    assert {d.model: (d.workers, d.reason) for d in decided} == {
        "quick": (0, "idle"), "slow": (1, "wake")}
