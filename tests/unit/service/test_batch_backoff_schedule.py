"""The per-batch retry schedule: delays double from the base up to the cap; an outage is not
counted against the batch, and success forgets it."""

from __future__ import annotations

import uuid

import pytest

from service.batches import maintenance


def test_delays_double_up_to_the_cap_and_outages_do_not_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintenance.random, "uniform", lambda a, b: 1.0)  # no jitter
    backoff, batch = maintenance._Backoff(), uuid.uuid4()
    delays = []
    for _ in range(9):
        backoff.failed(batch, 0.0, counts=True)
        delays.append(backoff._not_before[batch])
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert not backoff.ready(batch, 59.0) and backoff.ready(batch, 60.0)
    other = uuid.uuid4()
    assert [backoff.failed(other, 0.0, counts=False) for _ in range(3)] == [0, 0, 0]
    backoff.forget(batch)
    assert backoff.ready(batch, 0.0)
    assert backoff.failed(batch, 0.0, counts=True) == 1
