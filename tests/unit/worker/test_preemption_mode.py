"""The preemption mode: the setting, the fallback decision an engine's capability drives, the
events the worker appends (in SQL), and what GET /v1/jobs/{id} shows of them."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.dialects import postgresql

from service.jobs.job_records import job_public_view
from service.store.lifecycle import append_events, job_event
from service.store.models.jobs import Job
from service.store.settings import Settings
from worker.checkpoint import preemption_mode
from worker.engine.base import supports_kv_offload
from worker.engine.sim import SimEngine


class _OffloadingEngine:
    supports_kv_offload = True


def test_setting_defaults_to_recompute_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("FAIRWAY_PREEMPTION_MODE", raising=False)
    assert Settings().engine.preemption_mode == "recompute"
    monkeypatch.setenv("FAIRWAY_PREEMPTION_MODE", "swap")
    assert Settings().engine.preemption_mode == "swap"
    monkeypatch.setenv("FAIRWAY_PREEMPTION_MODE", "teleport")
    with pytest.raises(ValidationError):
        Settings()


def test_capability_flag_is_optional_and_false_for_the_sim_engine():
    assert supports_kv_offload(SimEngine()) is False
    assert supports_kv_offload(object()) is False  # an engine without the attribute
    assert supports_kv_offload(_OffloadingEngine()) is True


def test_swap_falls_back_to_recompute_where_the_engine_cannot_offload():
    mode = preemption_mode("swap", SimEngine())
    assert (mode.requested, mode.used) == ("swap", "recompute")
    assert mode.fallback_reason and "SimEngine" in mode.fallback_reason
    fields = mode.event_fields()
    assert fields["mode"] == "recompute" and fields["requested_mode"] == "swap"
    assert fields["fallback_reason"] == mode.fallback_reason


def test_swap_is_kept_where_the_engine_offloads_and_recompute_never_falls_back():
    swap = preemption_mode("swap", _OffloadingEngine())
    assert swap.used == "swap" and swap.fallback_reason is None
    assert swap.event_fields() == {"mode": "swap"}
    for engine in (SimEngine(), _OffloadingEngine()):
        assert preemption_mode("recompute", engine).event_fields() == {"mode": "recompute"}
    with pytest.raises(ValueError):
        preemption_mode("teleport", SimEngine())


def test_events_are_appended_in_sql_not_rewritten():
    event = job_event("preempted", mode="recompute", checkpoint_tokens=3)
    assert event["type"] == "preempted" and dt.datetime.fromisoformat(event["at"]).tzinfo
    sql = str(update(Job).values(events=append_events(event))
              .compile(dialect=postgresql.dialect()))
    assert "coalesce(jobs.events, '[]'::jsonb) || CAST(" in sql and "AS JSONB)" in sql


def _job(**fields: Any) -> Job:
    now = dt.datetime.now(dt.UTC)
    base: dict[str, Any] = dict(
        id=uuid.uuid4(), kind="batch", status="succeeded", endpoint="chat.completions",
        model="m", service_tier="flex", priority=2, attempt=3, created_at=now, queued_at=now,
        preemptions=1, recomputed_tokens=42, parked_seconds=1.23456,
        events=[{"at": now.isoformat(), "type": "preempted", "mode": "recompute"}])
    base.update(fields)
    return Job(**base)


def test_public_view_shows_the_preemption_record_and_events():
    view = job_public_view(_job())
    assert view["preemption"] == {"preemptions": 1, "recomputed_tokens": 42,
                                  "parked_seconds": 1.235}
    assert [e["type"] for e in view["events"]] == ["preempted"]
    fresh = job_public_view(_job(events=None, preemptions=0, recomputed_tokens=0,
                                 parked_seconds=0.0))
    assert fresh["events"] == [] and fresh["preemption"]["preemptions"] == 0
