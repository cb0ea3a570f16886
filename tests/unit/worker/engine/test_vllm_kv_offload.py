"""Swap mode on vLLM: the KV offloading connector is wired only where vLLM can run it (CUDA).
The GPU path itself cannot run here; this checks the configuration we hand vLLM."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("vllm")

from worker.engine import VllmEngineConfig
from worker.engine.vllm_engine import VllmEngine, _kv_offload_config

_GIB = 1 << 30


def _platform(cuda: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(is_cuda=lambda: cuda, device_name="cuda" if cuda else "cpu")


def test_cuda_gets_the_offloading_connector_to_cpu_memory():
    config = _kv_offload_config(2.5, _platform(True))
    assert config.kv_connector == "OffloadingConnector"
    assert config.kv_role == "kv_both"
    assert config.kv_connector_extra_config["cpu_bytes_to_use"] == int(2.5 * _GIB)


def test_no_connector_off_cuda():
    assert _kv_offload_config(2.5, _platform(False)) is None


def test_cpu_build_ignores_kv_offload_and_reports_no_capability():
    engine = VllmEngine(VllmEngineConfig("unused-model-path", "m", kv_cache_gib=1.0,
                                         kv_offload_gib=4.0))
    assert engine.supports_kv_offload is False  # not started, and no connector
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        pytest.skip("a CUDA platform: the connector is wired there")
    args = engine._engine_args()
    assert args.kv_transfer_config is None
    engine.kv_connector = "OffloadingConnector"  # what start() records on a GPU build
    assert engine.supports_kv_offload is True
