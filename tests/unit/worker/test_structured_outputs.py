"""Structured outputs on the worker: the stored body's response_format as the engine's
`StructuredOutput`, its mapping to vLLM's `StructuredOutputsParams`, the capability each
engine advertises, and the refusal (never a silent free-text answer) where it is missing."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from service.store.heartbeats import STRUCTURED_OUTPUTS
from service.store.settings import EngineSettings, Settings
from worker.beat import engine_capabilities
from worker.claimed_job import ClaimedJob
from worker.engine import vllm_structured
from worker.engine.base import (
    EngineRequest,
    SamplingSpec,
    StructuredOutput,
    UnsupportedParameter,
    supports_structured_outputs,
)
from worker.engine.sim import SimEngine
from worker.runner import JobRunner
from worker.structured import resume_checkpoint, structured_output

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "N", "schema": SCHEMA}}


def test_the_body_maps_to_the_engine_spec() -> None:
    assert structured_output({}) is None
    assert structured_output({"response_format": {"type": "text"}}) is None
    assert structured_output({"response_format": {"type": "json_object"}}) == \
        StructuredOutput(schema=None)
    assert structured_output({"response_format": AS_SCHEMA}) == StructuredOutput(SCHEMA)


def test_a_structured_job_reruns_instead_of_resuming_mid_document() -> None:
    assert resume_checkpoint({"response_format": AS_SCHEMA}, [1, 2, 3]) == []
    assert resume_checkpoint({"response_format": {"type": "json_object"}}, [1]) == []
    assert resume_checkpoint({"response_format": {"type": "text"}}, [1, 2]) == [1, 2]
    assert resume_checkpoint({}, [4]) == [4]


def runner(engine: Any) -> JobRunner:
    settings = Settings(engine=EngineSettings(kind="sim", served_model_name="sim-model"))
    return JobRunner(engine=engine, settings=settings, worker_id="w", sessionmaker=None,  # type: ignore[arg-type]
                     redis=None, outbox=None, deps=None)  # type: ignore[arg-type]


def test_the_runner_puts_the_format_into_the_sampling_spec() -> None:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "count"}],
            "temperature": 0, "response_format": AS_SCHEMA}
    job = ClaimedJob(job_id=None, attempt=1, endpoint="chat.completions", request=body,  # type: ignore[arg-type]
                     max_tokens=20, priority=0, checkpoint=[])
    request = runner(SimEngine())._build_request(job, "rid")
    assert request.sampling.structured == StructuredOutput(SCHEMA)
    plain = ClaimedJob(job_id=None, attempt=1, endpoint="completions",  # type: ignore[arg-type]
                       request={"prompt": "p"}, max_tokens=5, priority=0, checkpoint=[])
    assert runner(SimEngine())._build_request(plain, "rid").sampling.structured is None


def test_the_sim_engine_refuses_it_naming_the_parameter() -> None:
    engine = SimEngine()
    assert not supports_structured_outputs(engine)
    assert engine_capabilities(engine) == []

    async def run() -> None:
        await engine.start()
        try:
            request = EngineRequest("r", [1, 2, 3], SamplingSpec(
                max_tokens=4, structured=StructuredOutput()))
            with pytest.raises(UnsupportedParameter) as info:
                async for _ in engine.generate(request):
                    pytest.fail("a refused request yields nothing")
            assert info.value.param == "response_format"
            assert info.value.code == "unsupported_value"
            assert "response_format" in str(info.value)
            # Plain text still runs.
            plain = EngineRequest("p", [1, 2, 3], SamplingSpec(max_tokens=2))
            assert [d async for d in engine.generate(plain)][-1].finished
        finally:
            await engine.shutdown()

    asyncio.run(run())


def test_an_engine_that_says_so_is_advertised() -> None:
    able = types.SimpleNamespace(supports_structured_outputs=True)
    assert engine_capabilities(able) == [STRUCTURED_OUTPUTS]  # type: ignore[arg-type]


def platform(supported: bool) -> Any:
    return types.SimpleNamespace(supports_structured_output=lambda: supported)


def config(backend: str) -> Any:
    return types.SimpleNamespace(
        structured_outputs_config=types.SimpleNamespace(backend=backend))


def test_availability_needs_the_platform_and_the_backend_library(
        monkeypatch: pytest.MonkeyPatch) -> None:
    installed: set[str] = {"xgrammar"}
    monkeypatch.setattr(vllm_structured.importlib.util, "find_spec",
                        lambda name: object() if name in installed else None)
    available = vllm_structured.structured_outputs_available
    assert available(config("auto"), platform(True))
    assert available(config("xgrammar"), platform(True))
    assert not available(config("auto"), platform(False))
    assert not available(config("guidance"), platform(True))
    installed.clear()
    assert not available(config("auto"), platform(True))
    installed.add("llguidance")
    assert available(config("auto"), platform(True))  # auto falls back to guidance


def test_the_mapping_to_vllm_is_what_its_own_server_does() -> None:
    pytest.importorskip("vllm", reason="the real engine is not installed")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    for fmt in ({"type": "json_object"}, AS_SCHEMA):
        ours = vllm_structured.to_vllm(structured_output({"response_format": fmt}))  # type: ignore[arg-type]
        theirs = ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "x"}],
             "response_format": fmt}).to_sampling_params(
                 16, {}).structured_outputs  # type: ignore[call-arg]
        assert (ours.json, ours.json_object) == (theirs.json, theirs.json_object)
