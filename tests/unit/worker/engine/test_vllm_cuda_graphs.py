"""CUDA graphs on a GPU, eager on CPU: the engine's `enforce_eager` as we hand it to vLLM.

On an H200 an eager decode step of Llama-3-8B's shape took 2.4x its graphed time at batch 1
(bench/gpu_step_costs.py, docs/scale.md), so a worker must not run eager there by default; on
CPU eager keeps the start fast. The GPU path cannot run here: a fake platform stands in."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import vllm.platforms

from service.store.settings import EngineSettings
from worker.engine import VllmEngineConfig
from worker.engine.vllm_engine import VllmEngine
from worker.main import engine_config


class _Platform:
    """The installed platform, but for whether it is a CPU."""

    def __init__(self, real: object, cpu: bool) -> None:
        self._real, self._cpu = real, cpu

    def is_cpu(self) -> bool:
        return self._cpu

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def _engine(enforce_eager: bool | None) -> VllmEngine:
    return VllmEngine(VllmEngineConfig("unused-model-path", "m", kv_cache_gib=1.0,
                                       enforce_eager=enforce_eager))


def _args(monkeypatch: pytest.MonkeyPatch, *, cpu: bool, enforce_eager: bool | None) -> object:
    # Once with the real platform first: a vLLM module imported while the stand-in is set
    # would keep it for good.
    _engine(enforce_eager)._engine_args()
    real = vllm.platforms.current_platform
    monkeypatch.setattr(vllm.platforms, "current_platform", _Platform(real, cpu))
    return _engine(enforce_eager)._engine_args()


@pytest.mark.parametrize(("cpu", "setting", "eager"), [
    (True, None, True),  # CPU: eager unless told otherwise
    (False, None, False),  # GPU: vLLM's CUDA graphs
    (False, True, True),  # a setting wins either way
    (True, False, False),
])
def test_eager_follows_the_platform_unless_set(monkeypatch: pytest.MonkeyPatch, cpu: bool,
                                               setting: bool | None, eager: bool) -> None:
    assert _args(monkeypatch, cpu=cpu, enforce_eager=setting).enforce_eager is eager


def test_the_setting_reaches_the_engine_config() -> None:
    assert engine_config(EngineSettings(model_path="m")).enforce_eager is None
    config = engine_config(EngineSettings(model_path="m", enforce_eager=True))
    assert isinstance(config, VllmEngineConfig) and config.enforce_eager is True
