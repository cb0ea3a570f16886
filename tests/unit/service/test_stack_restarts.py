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
