"""The zero-cost engine (FAIRWAY_SIM_SPEED=inf) that bench/control_plane.py runs on: the
setting reaches the sim engine, whose steps then take no wall time at all."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from service.store.settings import EngineSettings
from worker.engine.base import EngineRequest, SamplingSpec
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.main import engine_config


def test_inf_sim_speed_reaches_the_sim_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRWAY_SIM_SPEED", "inf")
    config = engine_config(EngineSettings(kind="sim"))
    assert isinstance(config, SimEngineConfig)
    assert config.speed == math.inf


def test_the_zero_cost_engine_serves_a_request_without_modelled_step_time() -> None:
    # A 200-token prompt and 64 decodes cost about 0.02 s + 0.08 s + 64 x 0.0255 s ~ 1.7 s of
    # modelled time; at speed inf the steps only yield to the loop.
    async def serve() -> tuple[float, float]:
        engine = SimEngine(SimEngineConfig(speed=math.inf))
        await engine.start()
        t0 = time.perf_counter()
        req = EngineRequest(request_id="r", prompt_token_ids=list(range(1, 201)),
                            sampling=SamplingSpec(max_tokens=64, temperature=0.0,
                                                 ignore_eos=True))
        async for _ in engine.generate(req):
            pass
        wall = time.perf_counter() - t0
        await engine.shutdown()
        return wall, engine.sim_time_s

    wall, modelled = asyncio.run(serve())
    assert modelled > 1.0
    assert wall < 0.25 * modelled
