"""Structured outputs on vLLM: whether this install can do them, and the request mapping.

vLLM constrains decoding with a grammar backend chosen by its ``structured_outputs_config``
(``backend="auto"`` by default: xgrammar, falling back to guidance for schema features
xgrammar lacks). Fairway maps ``response_format`` the way vLLM's own OpenAI server does
(``structured_outputs_from_response_format``): json_object -> ``json_object=True``,
json_schema -> ``json=<schema>``. vLLM validates the schema against its backend when the
request is submitted; a schema the backend cannot compile is an `EngineError` (a 400).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from worker.engine.base import StructuredOutput

# The import each backend needs ("auto" needs either of the first two).
_BACKEND_MODULES = {
    "xgrammar": ("xgrammar",),
    "guidance": ("llguidance",),
    "auto": ("xgrammar", "llguidance"),
    "outlines": ("outlines_core",),
    "lm-format-enforcer": ("lmformatenforcer",),
}


def structured_outputs_available(vllm_config: Any, platform: Any) -> bool:
    """True when the platform allows structured outputs and the configured backend's
    library is installed (a vLLM install without one cannot honour response_format)."""
    if not getattr(platform, "supports_structured_output", lambda: True)():
        return False
    config = getattr(vllm_config, "structured_outputs_config", None)
    backend = str(getattr(config, "backend", "auto"))
    modules = _BACKEND_MODULES.get(backend.split(":")[0], ())
    return any(importlib.util.find_spec(m) is not None for m in modules)


def to_vllm(structured: StructuredOutput) -> Any:
    """vLLM's `StructuredOutputsParams` for one request."""
    from vllm.sampling_params import StructuredOutputsParams

    if structured.schema is None:
        return StructuredOutputsParams(json_object=True)
    return StructuredOutputsParams(json=structured.schema)
