"""What workers publish in Redis for the dispatcher and the API to read: the engine's step
clock (worker.engine.step_clock), as one short text value."""

from __future__ import annotations


def encode_step_clock(clock: tuple[float | None, float]) -> str:
    started, step = clock
    return "idle" if started is None else f"{started:.6f} {step:.6f}"


def decode_step_clock(raw: bytes | str | None) -> tuple[float | None, float] | None:
    """The published text back; None when absent or malformed (the worker said nothing)."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    if text == "idle":
        return None, 0.0
    try:
        started, step = (float(part) for part in text.split())
    except ValueError:
        return None
    return (started, step) if step > 0 else None
