import datetime as dt

import pytest

from service.jobs.door_request import classify, classify_background
from service.store.models.jobs import JobKind

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("tier", "kind", "priority", "echo"),
    [
        (None, JobKind.REALTIME, 1, "default"),
        ("auto", JobKind.REALTIME, 1, "default"),
        ("default", JobKind.REALTIME, 1, "default"),
        ("priority", JobKind.REALTIME, 0, "priority"),
        ("flex", JobKind.BATCH, 2, "flex"),
    ],
)
def test_service_tier_selects_class_and_priority(tier, kind, priority, echo):
    c = classify(tier, None, now=NOW, realtime_deadline_s=60, flex_deadline_s=600)
    assert (c.kind, c.priority, c.service_tier) == (kind, priority, echo)


def test_default_deadlines_depend_on_class():
    rt = classify("default", None, now=NOW, realtime_deadline_s=60, flex_deadline_s=600)
    flex = classify("flex", None, now=NOW, realtime_deadline_s=60, flex_deadline_s=600)
    assert rt.deadline_at - NOW == dt.timedelta(seconds=60)
    assert flex.deadline_at - NOW == dt.timedelta(seconds=600)


def test_explicit_deadline_overrides_default():
    c = classify("priority", 1500, now=NOW, realtime_deadline_s=60, flex_deadline_s=600)
    assert c.deadline_at - NOW == dt.timedelta(milliseconds=1500)


def test_a_background_response_is_offline_work_with_the_flex_deadline():
    c = classify_background(None, now=NOW, flex_deadline_s=600)
    assert (c.kind, c.priority, c.service_tier) == (JobKind.BATCH, 2, "flex")
    assert c.deadline_at - NOW == dt.timedelta(seconds=600)
    own = classify_background(90_000, now=NOW, flex_deadline_s=600)
    assert own.deadline_at - NOW == dt.timedelta(seconds=90)
