"""A job's Redis Stream (``service.store.keys.stream_key``): what a worker tells the API about one
job, entry by entry, typed, with its one wire format.

- ``Delta``: new text of the attempt that wrote it; ``offset`` is the text's character offset in
  the whole output, so a reader can splice a resumed or re-run attempt onto what it relayed.
- ``Final``: the job succeeded; written after its row is final in Postgres.
- ``Failure``: the job failed or was refused or cancelled; also after the row is final.

Writers build an entry and ``xadd(key, fields(entry))``; the relay ``parse``s. An entry that
does not parse is None, and the reader skips it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from redis.typing import EncodableT, FieldT


@dataclass(frozen=True, slots=True)
class Delta:
    attempt: int
    text: str
    tokens: int
    offset: int  # the text's first character within the attempt's whole output
    # The worker's first delta carries its span's W3C traceparent when tracing is on, so the
    # API's relay hop continues the job's trace (service.store.tracing).
    traceparent: str | None = None


def followed_by(delta: Delta, later: Delta) -> Delta:
    """``delta`` with ``later``'s text after it: one entry for both (the caller checks that
    ``later`` continues it). The first keeps its offset and traceparent."""
    return replace(delta, text=delta.text + later.text, tokens=delta.tokens + later.tokens)


@dataclass(frozen=True, slots=True)
class Final:
    attempt: int
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    # The worker settled the job's quota reservation, which frees its concurrency slot too:
    # the API's own release at the request's end would find nothing (one Redis call saved).
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Failure:
    attempt: int
    status: int
    code: str | None
    message: str
    retry_after: int | None = None  # seconds, for a 429 or 503
    param: str | None = None  # the request parameter at fault, when one is


Entry = Delta | Final | Failure
Fields = dict[FieldT, EncodableT]  # what redis-py's xadd takes


def fields(entry: Entry) -> Fields:
    """The entry as stream fields (Redis takes str and int values, never None)."""
    match entry:
        case Delta(attempt, text, tokens, offset, traceparent):
            out: Fields = {"type": "delta", "attempt": attempt, "text": text, "tokens": tokens,
                           "offset": offset}
            if traceparent is not None:
                out["traceparent"] = traceparent
            return out
        case Final(attempt, finish_reason, prompt, completion, settled):
            out = {"type": "final", "attempt": attempt, "finish_reason": finish_reason or "",
                   "prompt_tokens": prompt, "completion_tokens": completion}
            if settled:
                out["settled"] = 1
            return out
        case Failure(attempt, status, code, message, retry_after, param):
            out = {"type": "error", "attempt": attempt, "status": status, "code": code or "",
                   "message": message}
            if retry_after is not None:
                out["retry_after"] = retry_after
            if param is not None:
                out["param"] = param
            return out
    raise TypeError(f"not a stream entry: {entry!r}")


def parse(raw: Mapping[bytes, bytes] | Mapping[str, str]) -> Entry | None:
    """A stream entry back from Redis's bytes, or None when it is not one of ours."""
    f = {_text(k): _text(v) for k, v in raw.items()}
    try:
        attempt = int(f.get("attempt", 0))
        kind = f.get("type")
        if kind == "delta":
            return Delta(attempt, f.get("text", ""), int(f.get("tokens", 0)), int(f["offset"]),
                         f.get("traceparent"))
        if kind == "final":
            return Final(attempt, f.get("finish_reason") or None, int(f.get("prompt_tokens", 0)),
                         int(f.get("completion_tokens", 0)), f.get("settled") == "1")
        if kind == "error":
            retry = f.get("retry_after")
            return Failure(attempt, int(f.get("status", 500)), f.get("code") or None,
                           f.get("message", "The job failed."), int(retry) if retry else None,
                           f.get("param") or None)
    except (ValueError, KeyError):
        return None
    return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
