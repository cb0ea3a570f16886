"""The explorer's timeline from a job's row: steps in order (events between the stamps), the
phases drawn as a bar, durations, and the sentence that says where the time went."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from service.admin.job_timeline import iso_ms, timeline
from service.store.models.jobs import Job

T0 = dt.datetime(2026, 12, 5, 23, 59, 58, 500_000, tzinfo=dt.UTC)


def at(ms: int) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


def job(**fields: Any) -> Job:
    base: dict[str, Any] = dict(
        id=uuid.uuid4(), kind="realtime", status="succeeded", service_tier="default",
        endpoint="chat.completions", model="m", priority=1, attempt=1, worker_id="w1",
        completion_tokens=21, ttft_slo_ms=1000, preemptions=0, parked_seconds=0.0,
        created_at=at(0), queued_at=at(0), assigned_at=at(1800), started_at=at(1820),
        first_token_at=at(1880), finished_at=at(2080), events=None)
    base.update(fields)
    return Job(**base)


def test_times_are_utc_to_the_millisecond():
    assert iso_ms(at(1880)) == "2026-12-06T00:00:00.380Z"
    east = dt.timezone(dt.timedelta(hours=2))
    assert iso_ms(dt.datetime(2026, 1, 1, 2, 0, 0, 7000, tzinfo=east)) == \
        "2026-01-01T00:00:00.007Z"


def test_a_job_queued_behind_others_says_so():
    view = timeline(job())
    assert [s["type"] for s in view["steps"]] == ["created", "assigned", "started",
                                                  "first_token", "finished"]
    assert view["steps"][1]["worker"] == "w1"
    assert [(p["phase"], p["ms"]) for p in view["phases"]] == [
        ("queued", 1800), ("placed", 20), ("prefill", 60), ("decode", 200)]
    assert view["durations"] == {"queue_ms": 1800, "ttft_ms": 1880, "tpot_ms": 10,
                                 "total_ms": 2080, "parked_ms": 0}
    assert view["verdict"] == (
        "First token after 1,880 ms against a 1,000 ms target (missed). Most of its 2,080 ms "
        "was waiting in the queue: 1,800 ms (86%).")


def test_a_preempted_job_shows_each_run_and_its_parking():
    events = [{"at": at(1930).isoformat(), "type": "preempted", "worker": "w1", "mode": "swap"},
              {"at": at(2490).isoformat(), "type": "resumed", "worker": "w2"}]
    view = timeline(job(events=events, preemptions=1, parked_seconds=0.5, queued_at=at(1930),
                        assigned_at=at(2430), started_at=at(2450), finished_at=at(2690),
                        worker_id="w2"))
    assert [s["type"] for s in view["steps"]] == [
        "created", "first_token", "preempted", "assigned", "started", "resumed", "finished"]
    preempted = view["steps"][2]
    assert preempted["worker"] == "w1" and preempted["detail"] == {"mode": "swap"}
    # The first token came in the run the preemption ended, on w1; the rest on w2.
    assert [s["worker"] for s in view["steps"]] == [None, "w1", "w1", "w2", "w2", "w2", "w2"]
    assert [(p["phase"], p["ms"]) for p in view["phases"]] == [
        ("queued", 1880), ("decode", 50), ("parked", 500), ("placed", 20), ("prefill", 40),
        ("decode", 200)]
    assert (view["durations"]["parked_ms"], view["durations"]["queue_ms"]) == (500, 1880)
    assert "Preempted 1 time." in view["verdict"]


def test_a_running_job_has_an_open_last_phase():
    running = job(status="running", finished_at=None, completion_tokens=None)
    view = timeline(running, now=at(3000))
    last = view["phases"][-1]
    assert last["phase"] == "decode" and last["open"] and last["ms"] == 1120
    assert view["durations"]["total_ms"] is None and view["durations"]["tpot_ms"] is None


def test_a_cancelled_queued_job_and_a_failed_one():
    cancelled = job(status="cancelled", assigned_at=None, started_at=None, first_token_at=None,
                    finished_at=at(700), cancelled_at=at(700), error={"code": "cancelled"})
    view = timeline(cancelled)
    assert [s["type"] for s in view["steps"]] == ["created", "cancelled"]
    assert [(p["phase"], p["ms"]) for p in view["phases"]] == [("queued", 700)]
    assert view["verdict"].endswith("It was cancelled (cancelled).")
    failed = timeline(job(status="failed", error={"code": "engine_error"}, ttft_slo_ms=None,
                          service_tier="flex"))
    assert "no TTFT target: flex class" in failed["verdict"]
    assert failed["verdict"].endswith("It failed: engine_error.")


def test_a_lease_that_ran_out_puts_the_job_back_in_the_queue():
    view = timeline(job(queued_at=at(900), assigned_at=at(1000), started_at=at(1010),
                        first_token_at=at(1100), finished_at=at(1200)))
    assert [s["type"] for s in view["steps"]][:2] == ["created", "requeued"]
    assert [p["phase"] for p in view["phases"]][:2] == ["queued", "queued"]
