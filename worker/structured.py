"""A stored request body's ``response_format`` as the engine's `StructuredOutput`.

The API validated the format before storing the body (service.jobs.response_format), so this
only reads it. A structured job never resumes from a checkpoint: the grammar would restart
at the checkpoint's end and make the continuation a second JSON document, so it is re-run
from its first token instead (exact for greedy or seeded decoding, as any re-run).
"""

from __future__ import annotations

from typing import Any

from worker.engine.base import StructuredOutput


def structured_output(body: dict[str, Any]) -> StructuredOutput | None:
    """None for free text (no response_format, or type "text")."""
    fmt = body.get("response_format") or {}
    kind = fmt.get("type")
    if kind == "json_object":
        return StructuredOutput()
    if kind == "json_schema":
        return StructuredOutput(schema=dict(fmt["json_schema"]["schema"]))
    return None


def resume_checkpoint(body: dict[str, Any], checkpoint: list[int]) -> list[int]:
    """The tokens an attempt continues after: none for a structured job (module docstring)."""
    return [] if structured_output(body) is not None else checkpoint
