"""What processes publish in Redis for others to read: a worker engine's step clock
(worker.engine.step_clock), as one short text value, the active dispatcher's heartbeat, and
its realtime outlook per model (scheduler.outlook)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from scheduler.outlook import RealtimeOutlook

# What a worker's heartbeat lists under "capabilities" when its engine can do it; the API's
# model catalog (service.web.catalog) reads them to refuse what no worker can honour.
STRUCTURED_OUTPUTS = "structured_outputs"  # response_format json_object / json_schema


@dataclass(frozen=True, slots=True)
class LeaderBeat:
    """The active dispatcher says it is alive (service.store.keys.LEADER_KEY)."""

    dispatcher: str  # host-pid of the leader
    ts: float  # epoch seconds when written

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def decode(raw: bytes | str | None) -> LeaderBeat | None:
        try:
            body = json.loads(raw) if raw else None
            return LeaderBeat(str(body["dispatcher"]), float(body["ts"])) if body else None
        except (ValueError, KeyError, TypeError):
            return None


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


def encode_outlook(outlook: RealtimeOutlook) -> str:
    return json.dumps(outlook.as_dict())


def decode_outlook(raw: bytes | str | None) -> RealtimeOutlook | None:
    """The outlook back; None when absent or not one."""
    try:
        body = json.loads(raw) if raw else None
        if not isinstance(body, dict):
            return None
        outlook = RealtimeOutlook(**body)
        # JSON brings the backlog and the adapters back as lists; the outlook holds tuples.
        return replace(outlook, backlog=tuple((str(t), int(q), float(w))
                                              for t, q, w in outlook.backlog),
                       warm_adapters=tuple(str(a) for a in outlook.warm_adapters),
                       deadlines=tuple((str(t), float(a), float(b))
                                       for t, a, b in outlook.deadlines),
                       rt_frees_s=tuple(float(f) for f in outlook.rt_frees_s))
    except (ValueError, KeyError, TypeError):
        return None


def adapter_load_times(published: object) -> dict[str, tuple[list[float], float]]:
    """A worker beat's ``adapter_load_times`` (``{adapter id: {"seconds": [...], "at": t}}``,
    worker.beat) as adapter id -> (its recent load seconds, when the last ended). Another
    process's writing: a malformed entry, or sample, is skipped, never trusted."""
    out: dict[str, tuple[list[float], float]] = {}
    if not isinstance(published, dict):
        return out
    for adapter, entry in published.items():
        if not isinstance(entry, dict):
            continue
        raw, at = entry.get("seconds"), _number(entry.get("at"))
        samples = [_number(s) for s in raw] if isinstance(raw, list) else []
        seconds = [s for s in samples if s is not None and s >= 0]
        if seconds and at is not None:
            out[str(adapter)] = (seconds, at)
    return out


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
