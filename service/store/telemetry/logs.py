"""Logging setup shared by every process: one line per record, never a prompt or a key.

JSON lines by default (FAIRWAY_LOG_FORMAT=json|text); the formatter and its redaction guard
live in service.store.telemetry.logfmt (docs/observability.md).
"""

from __future__ import annotations

import logging
import os
import sys

from service.store.telemetry.logfmt import JsonFormatter, TextFormatter


def configure_logging(level: str = "INFO", fmt: str | None = None) -> None:
    root = logging.getLogger()
    if getattr(root, "_fairway_configured", False):
        return
    fmt = (fmt or os.environ.get("FAIRWAY_LOG_FORMAT") or "json").lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    root._fairway_configured = True  # type: ignore[attr-defined]
