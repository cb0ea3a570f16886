"""Engines: the real one (vLLM) and a deterministic simulated one, behind one interface.

See `worker.engine.base` for the interface and its errors convention.
"""

from __future__ import annotations

from typing import Any

from worker.engine.base import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Engine,
    EngineError,
    EngineNotStarted,
    EngineRequest,
    EngineStats,
    InvalidRequest,
    PromptTooLong,
    SamplingSpec,
    TokenDelta,
)
from worker.engine.sim import SimEngine

__all__ = [
    "FINISH_ABORT",
    "FINISH_LENGTH",
    "FINISH_STOP",
    "Engine",
    "EngineError",
    "EngineNotStarted",
    "EngineRequest",
    "EngineStats",
    "InvalidRequest",
    "PromptTooLong",
    "SamplingSpec",
    "SimEngine",
    "TokenDelta",
    "build_engine",
]


def build_engine(kind: str, **kwargs: Any) -> Engine:
    """Build an engine by kind: "sim" (SimEngine kwargs) or "vllm" (VllmEngine kwargs)."""
    if kind == "sim":
        return SimEngine(**kwargs)
    if kind == "vllm":
        # Imported here: the module itself is light, but keep vLLM-only code off the sim path.
        from worker.engine.vllm_engine import VllmEngine

        return VllmEngine(**kwargs)
    raise ValueError(f"unknown engine kind {kind!r} (expected 'sim' or 'vllm')")
