"""The webhook retry schedule: doubling waits with bounded jitter, capped, and a window from the
event after which the delivery fails. No clock: the draws and times are arguments."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from pathlib import Path

import pytest

from service.store.settings import WebhookSettings
from service.webhooks.schedule import JITTER, next_attempt_at, nominal_schedule, retry_delay

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(("failures", "nominal"), [(1, 5), (2, 10), (3, 20), (4, 40), (10, 2560),
                                                   (11, 3600), (40, 3600), (5000, 3600)])
def test_waits_double_from_the_base_up_to_the_cap(failures: int, nominal: float):
    mid = retry_delay(failures, base_s=5, max_s=3600, draw=lambda: 0.5)
    assert mid == pytest.approx(nominal)


def test_jitter_stays_within_its_band_and_never_past_the_cap():
    low = retry_delay(3, base_s=5, max_s=3600, draw=lambda: 0.0)
    high = retry_delay(3, base_s=5, max_s=3600, draw=lambda: 0.999999)
    assert low == pytest.approx(20 * (1 - JITTER))
    assert high == pytest.approx(20 * (1 + JITTER), rel=1e-5)
    assert retry_delay(30, base_s=5, max_s=3600, draw=lambda: 0.999999) == 3600
    assert retry_delay(30, base_s=5, max_s=3600, draw=lambda: 0.0) == pytest.approx(
        3600 * (1 - JITTER))


def test_jitter_spreads_retries():
    rng = random.Random(7)
    waits = {round(retry_delay(4, base_s=5, max_s=3600, draw=rng.random), 3) for _ in range(50)}
    assert len(waits) > 40  # not one synchronised retry time for every failed delivery


def test_failures_count_from_one():
    with pytest.raises(ValueError):
        retry_delay(0, base_s=5, max_s=60)


def test_next_attempt_inside_the_window_and_none_past_it():
    settings = WebhookSettings(backoff_base_seconds=5, backoff_max_seconds=3600,
                               retry_window_seconds=86400)
    at = next_attempt_at(failures=1, now=T0, event_at=T0, settings=settings, draw=lambda: 0.5)
    assert at == T0 + dt.timedelta(seconds=5)
    late = T0 + dt.timedelta(hours=23, minutes=30)  # an hour's wait would end past the day
    assert next_attempt_at(failures=20, now=late, event_at=T0, settings=settings,
                           draw=lambda: 0.5) is None
    assert next_attempt_at(failures=20, now=late - dt.timedelta(hours=1), event_at=T0,
                           settings=settings, draw=lambda: 0.5) == late


def test_the_default_schedule_spans_a_day():
    times = nominal_schedule(WebhookSettings())
    assert times[:5] == [0, 5, 15, 35, 75]
    assert times[-1] <= 86400 < times[-1] + 3600
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) == 3600 and gaps == sorted(gaps)
    assert len(times) == 33 and times[-1] == 84315  # docs/webhooks.md's retry table
    doc = (Path(__file__).resolve().parents[3] / "docs" / "webhooks.md").read_text()
    assert "| 13 ... 33 |" in doc and "to 23.4 h |" in doc
