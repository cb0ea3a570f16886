"""`fairway up` restarts a child that exits: at once, then with a doubling delay while it keeps
crashing, and from no delay again once it has stayed up."""

from __future__ import annotations

import pytest

from service.cli import stack


def test_crash_loop_backs_off_and_a_stable_child_starts_over(monkeypatch: pytest.MonkeyPatch):
    now = [100.0]
    monkeypatch.setattr(stack.time, "monotonic", lambda: now[0])
    r = stack.Restarts()
    assert r.due("worker")  # first exit: restart at once
    waits = []
    for _ in range(4):  # it keeps exiting right away
        t0 = now[0]
        while not r.due("worker"):
            now[0] += 0.1
        waits.append(round(now[0] - t0, 1))
    assert waits == pytest.approx([1.0, 2.0, 4.0, 8.0], abs=0.15)
    r.running("worker")
    now[0] += stack.Restarts.STABLE_S + 1
    r.running("worker")  # up for over a minute
    assert r.due("worker")  # restarted at once again


def test_stopping_children_get_their_drain() -> None:
    """`fairway up` waits out every child's drain before it kills (docs/jobs.md "Draining")."""
    from service.cli.stack import drain_patience_s
    from service.store.settings import Settings
    from service.store.settings_groups import ApiSettings, WorkerSettings

    settings = Settings()
    patience = drain_patience_s(settings)
    assert patience > settings.api.drain_delay_seconds + settings.api.drain_grace_seconds
    assert patience > settings.worker.drain_grace_seconds + 10
    longer = settings.with_changes(worker=WorkerSettings(drain_grace_seconds=300),
                                   api=ApiSettings(drain_grace_seconds=5))
    assert drain_patience_s(longer) > 300
