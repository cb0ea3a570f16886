"""Engines: the real one (vLLM) and a deterministic simulated one, behind one interface.

See `worker.engine.base` for the interface and its errors convention.
"""

from __future__ import annotations

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
from worker.engine.config import SimEngineConfig, VllmEngineConfig
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
    "SimEngineConfig",
    "TokenDelta",
    "VllmEngineConfig",
    "build_engine",
]


def build_engine(config: VllmEngineConfig | SimEngineConfig) -> Engine:
    """The engine a config is for: `SimEngine` or `VllmEngine` (not started)."""
    if isinstance(config, SimEngineConfig):
        return SimEngine(config)
    if isinstance(config, VllmEngineConfig):
        # Imported here: the module itself is light, but keep vLLM-only code off the sim path.
        from worker.engine.vllm_engine import VllmEngine

        return VllmEngine(config)
    raise TypeError(f"not an engine config: {config!r}")
