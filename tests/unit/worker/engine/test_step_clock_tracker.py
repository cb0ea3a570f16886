"""worker.engine.step_clock: publish only when the dispatcher's extrapolation would drift."""

from __future__ import annotations

import pytest

from service.store.heartbeats import decode_step_clock as decode
from service.store.heartbeats import encode_step_clock as encode
from worker.engine.step_clock import StepClock


def ticking(clock: StepClock, start: float, step: float, n: int) -> float:
    t = start
    for _ in range(n):
        t += step
        clock.tick(t, busy=True)
    return t


def test_steady_steps_publish_once_then_stay_quiet() -> None:
    clock = StepClock()
    changes: list[tuple[float | None, float]] = []
    clock.on_change = lambda: changes.append(clock.published)
    clock.tick(0.0, busy=True)
    ticking(clock, 0.0, 0.03, 50)
    assert len(changes) == 1
    started, step = changes[0]
    assert started == pytest.approx(0.03) and step == pytest.approx(0.03)


def test_a_phase_shift_is_published() -> None:
    clock = StepClock(tolerance_s=0.002)
    clock.tick(0.0, busy=True)
    t = ticking(clock, 0.0, 0.03, 10)
    before = clock.published
    clock.tick(t + 0.04, busy=True)  # one 40 ms step: later ends are 10 ms out of phase
    assert clock.published != before
    started, _ = clock.published
    assert started == pytest.approx(t + 0.04)


def test_a_period_change_is_published() -> None:
    clock = StepClock()
    clock.tick(0.0, busy=True)
    t = ticking(clock, 0.0, 0.03, 10)
    ticking(clock, t, 0.06, 20)
    assert clock.published[1] == pytest.approx(0.06, rel=0.1)


def test_idle_is_published_and_a_long_gap_is_not_a_step() -> None:
    clock = StepClock(max_gap_s=2.0)
    clock.tick(0.0, busy=True)
    ticking(clock, 0.0, 0.03, 5)
    clock.tick(0.2, busy=False)
    assert clock.published == (None, 0.0)
    clock.tick(10.0, busy=True)  # woke after 10 s: no period from that gap
    clock.tick(10.03, busy=True)
    assert clock.published[1] == pytest.approx(0.03)


def test_wire_format_round_trips_and_rejects_garbage() -> None:
    assert decode(encode((12.5, 0.025)).encode()) == (12.5, 0.025)
    assert decode(encode((None, 0.0))) == (None, 0.0)
    assert decode(None) is None
    assert decode(b"12 x") is None
    assert decode("12 0") is None
