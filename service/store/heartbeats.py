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
                                       for t, a, b in outlook.deadlines))
    except (ValueError, KeyError, TypeError):
        return None
