"""Read the spans Fairway's processes write with ``FAIRWAY_OTEL_SPANS_DIR`` (JSON lines, one
file per process: service.store.tracing.JsonLinesExporter)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

Span = dict[str, Any]


def read_spans(directory: Path) -> list[Span]:
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                spans.append(json.loads(line))
    return spans


def by_trace(spans: list[Span]) -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span["trace_id"]].append(span)
    return dict(traces)


def named(spans: list[Span], name: str) -> Span | None:
    """The first span called ``name`` (by start time), or None."""
    found = sorted((s for s in spans if s["name"] == name), key=lambda s: s["start_ns"])
    return found[0] if found else None
