"""Reading public LLM inference traces: the simulator's only file input (the edge; everything
after ``load_trace`` is pure).

Formats (``fmt``; ``"auto"`` picks by extension, then by the CSV header):

- ``azure``: the Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
  ``AzureLLMInferenceTrace_{code,conv}.csv``; Patel et al., "Splitwise", ISCA 2024), columns
  ``TIMESTAMP, ContextTokens, GeneratedTokens``, TIMESTAMP a date-time.
- ``burstgpt``: BurstGPT (Wang et al., 2024), columns ``Timestamp, Model, Request tokens,
  Response tokens, Total tokens, Log Type``, Timestamp in seconds. Failed requests carry 0
  response tokens; they are kept with one output token (their prefill was paid).
- ``jsonl``: one JSON object per line with ``timestamp``, ``input_length``, ``output_length``
  and optional ``hash_ids`` (prefix blocks, as Mooncake publishes its traces). Mooncake's
  timestamps are milliseconds, so this format's default ``time_unit`` is ``"ms"``.

Times come back in seconds since the trace's first request, sorted.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

FORMATS = ("azure", "burstgpt", "jsonl")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_DEFAULT_UNIT = {"burstgpt": "s", "jsonl": "ms"}


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float  # seconds since the trace's first request
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    model: str | None = None  # BurstGPT's Model column


def load_trace(
    path: str | Path, fmt: str = "auto", time_unit: str | None = None
) -> tuple[TraceRequest, ...]:
    """The trace's requests, sorted by time, from its first request at 0.

    ``path`` may name environment variables (``$FAIRWAY_TRACE_DIR/x.csv``): traces live
    outside the repository. ``time_unit`` (``s``, ``ms``, ``us``) overrides the format's unit
    for numeric timestamps."""
    resolved = Path(os.path.expandvars(os.fspath(path))).expanduser()
    if not resolved.is_file():
        raise FileNotFoundError(f"trace file not found: {resolved}")
    fmt = detect_format(resolved) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; known: {FORMATS}")
    unit = time_unit or _DEFAULT_UNIT.get(fmt, "s")
    if unit not in _UNITS:
        raise ValueError(f"unknown time_unit {unit!r}; known: {sorted(_UNITS)}")
    # Cached by content identity: a sweep loads the same trace for every point.
    stat = resolved.stat()
    return _load(str(resolved), fmt, unit, stat.st_mtime_ns, stat.st_size)


def detect_format(path: Path) -> str:
    if path.suffix in (".jsonl", ".json"):
        return "jsonl"
    with path.open(newline="") as f:
        header = [c.strip() for c in next(csv.reader(f), [])]
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    raise ValueError(f"cannot tell the trace format of {path.name} from its header {header}")


@functools.lru_cache(maxsize=8)
def _load(
    path: str, fmt: str, unit: str, _mtime_ns: int, _size: int
) -> tuple[TraceRequest, ...]:
    scale = _UNITS[unit]
    rows: list[tuple[float, int, int, tuple[int, ...], str | None]] = []
    with open(path, newline="") as f:
        if fmt == "jsonl":
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    rows.append((
                        float(d["timestamp"]) * scale, int(d["input_length"]),
                        int(d["output_length"]), tuple(int(h) for h in d.get("hash_ids", ())),
                        d.get("model"),
                    ))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{n}: bad trace line ({exc})") from None
        else:
            reader = csv.DictReader(f, skipinitialspace=True)
            for n, row in enumerate(reader, 2):
                try:
                    rows.append(_csv_row(fmt, row, scale))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{n}: bad trace row ({exc})") from None
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    return tuple(
        TraceRequest(t - t0, max(1, p), max(1, o), h, m) for t, p, o, h, m in rows
    )


def _csv_row(
    fmt: str, row: dict[str, str], scale: float
) -> tuple[float, int, int, tuple[int, ...], str | None]:
    if fmt == "azure":
        return (
            _timestamp(row["TIMESTAMP"], scale), int(row["ContextTokens"]),
            int(row["GeneratedTokens"]), (), None,
        )
    return (
        float(row["Timestamp"]) * scale, int(float(row["Request tokens"])),
        int(float(row["Response tokens"])), (), row.get("Model"),
    )


def _timestamp(text: str, scale: float) -> float:
    """A date-time (Azure's, with 7 fractional digits: cut to the microseconds Python
    parses) as epoch seconds, or a plain number in ``scale`` units."""
    text = text.strip()
    try:
        return float(text) * scale
    except ValueError:
        pass
    head, dot, frac = text.partition(".")
    if dot:
        digits = "".join(c for c in frac if c.isdigit())
        text = f"{head}.{digits[:6]}{frac[len(digits):]}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:  # naive: read as UTC, so the host's zone (and DST) cannot matter
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
