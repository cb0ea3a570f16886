"""The real engine: vLLM V1's `AsyncLLM` behind the `Engine` interface.

vLLM is imported only in `start()` (and in the stats logger factory it needs), so importing
this module is cheap and works where vLLM is not installed.

Where `stats()` gets its numbers: vLLM's scheduler builds a `SchedulerStats` (running and
waiting counts, KV cache usage) after every engine step and hands it to each stat logger we
pass to `AsyncLLM.from_vllm_config(stat_loggers=[...])` (`worker.engine.vllm_stats`); we keep the
latest one. vLLM sends no stats while idle, so the last snapshot goes stale when the last
request finishes or is aborted. We therefore clamp the snapshot with our own count of
in-flight requests: nothing in flight reads as an empty engine, and requests submitted after
the snapshot count as waiting until the next step reports them. `num_preemptions` adds up the
per-request PREEMPTED events vLLM reports in its IterationStats (see `make_stats_sink`).

Layer 1 of "realtime preempts batch" (docs/preemption.md): with ``preempt_for_priority`` on
(the default) and the priority policy, vLLM's scheduler is swapped for
`worker.engine.vllm_preempt`'s subclass, so a waiting request whose priority beats a running
one's by ``preempt_priority_gap`` preempts it (recompute) within one engine step.

"swap" preemption mode (docs/preemption.md, "Preemption modes"): with ``kv_offload_gib`` set
and a CUDA platform, the engine args get vLLM's KV offloading connector
(``kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
kv_connector_extra_config={"cpu_bytes_to_use": ...})``, what ``--kv-offloading-size`` expands to
in vLLM 0.32, but naming the connector so ``VLLM_USE_SIMPLE_KV_OFFLOAD`` cannot swap it). It
writes each full KV block to pinned CPU memory as it is computed, and a later request with the
same prefix (the resumed request, on this engine) loads those blocks back instead of
re-prefilling them. vLLM's CPU offloading runs only on CUDA-alike and XPU GPUs, so on the CPU
build nothing is added and ``supports_kv_offload`` stays False: the worker falls back to
recompute. The GPU path is untested here (no GPU in CI).

The engine core runs in child processes, so the program that starts this engine needs an
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator
from typing import Any

from worker.engine.base import (
    FINISH_ABORT,
    EngineError,
    EngineNotStarted,
    EngineRequest,
    EngineStats,
    TokenDelta,
    UnsupportedParameter,
    validate_request,
)
from worker.engine.config import VllmEngineConfig
from worker.engine.lora import AdapterLoadFailed, AdapterLoads, LoraSpec
from worker.engine.step_clock import StepClock
from worker.engine.vllm_stats import make_stats_sink
from worker.engine.vllm_structured import structured_outputs_available, to_vllm

log = logging.getLogger(__name__)

_GIB = 1 << 30


class VllmEngine:
    """vLLM behind the `Engine` interface, set up as ``config`` says (nothing starts yet)."""

    def __init__(self, config: VllmEngineConfig) -> None:
        self.config = config
        self.model_name = config.model_name
        self.kv_connector: str | None = None  # the KV connector vLLM runs, once started
        self.scheduler_cls: str | None = None  # the class vLLM runs, once started
        self._num_preemptions = 0
        self.step_clock = StepClock()  # ticked by every step's stats, published by the host
        self.start_seconds: float | None = None  # how long start() took
        self._llm: Any = None
        self._tokenizer: Any = None
        self._last_sched: Any = None
        self._inflight: set[str] = set()
        self._kv_capacity_tokens = 0
        # Whether response_format can be honoured (worker.engine.vllm_structured), once started.
        self.supports_structured_outputs = False
        # Tenants' adapters, loaded on first use (worker.engine.lora); None: LoRA off.
        self.adapter_loads = None if config.lora is None else AdapterLoads(
            config.lora, load=self._load_adapter, unload=self._unload_adapter)

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._llm is not None:
            return
        t0 = time.monotonic()
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.config.model_path)
        args = self._engine_args()
        # Building the engine blocks for tens of seconds (model load, KV allocation, warm-up);
        # a thread keeps this event loop (heartbeats, other tasks) alive meanwhile. AsyncLLM
        # binds its asyncio parts lazily, on the first call from this loop.
        self._llm = await asyncio.to_thread(self._build, args)
        cache = self._llm.vllm_config.cache_config
        self.supports_structured_outputs = _structured_outputs_available(self._llm.vllm_config)
        self._kv_capacity_tokens = int(cache.num_gpu_blocks or 0) * int(cache.block_size)
        self.start_seconds = time.monotonic() - t0
        log.info(
            "vLLM engine %s ready in %.1f s: %d KV token slots",
            self.model_name,
            self.start_seconds,
            self._kv_capacity_tokens,
        )

    def _engine_args(self) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform

        c = self.config
        on_cpu = current_platform.is_cpu()
        if on_cpu:
            # vLLM's CPU platform reads this (whole GiB) and it wins over kv_cache_memory_bytes,
            # so set it when it can say exactly what we want and drop a stale one otherwise.
            if float(c.kv_cache_gib).is_integer():
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(c.kv_cache_gib))
            else:
                os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
            # The engine core drops torch to one thread unless this is set.
            if c.num_threads is not None:
                os.environ["OMP_NUM_THREADS"] = str(c.num_threads)
            else:
                os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
        kwargs: dict[str, Any] = {
            "model": c.model_path,
            "served_model_name": [self.model_name],
            "dtype": c.dtype or ("float32" if on_cpu else "auto"),
            "max_model_len": c.max_model_len,
            "max_num_seqs": c.max_num_seqs,
            "enforce_eager": on_cpu if c.enforce_eager is None else c.enforce_eager,
            "enable_prefix_caching": c.enable_prefix_caching,
            "scheduling_policy": c.scheduling_policy,
            "kv_cache_memory_bytes": int(c.kv_cache_gib * _GIB),
        }
        if c.max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = c.max_num_batched_tokens
        if c.tensor_parallel_size > 1:
            kwargs["tensor_parallel_size"] = c.tensor_parallel_size
        if c.lora is not None:
            kwargs.update(enable_lora=True, max_loras=c.lora.max_loras,
                          max_cpu_loras=c.lora.max_cpu_loras, max_lora_rank=c.lora.max_lora_rank)
        if c.kv_offload_gib:
            offload = _kv_offload_config(c.kv_offload_gib, current_platform)
            if offload is not None:
                kwargs["kv_transfer_config"] = offload
            else:
                log.warning(
                    "kv_offload_gib=%s ignored: vLLM's KV offloading needs a CUDA GPU "
                    "(platform %s); preemptions fall back to recompute",
                    c.kv_offload_gib,
                    current_platform.device_name,
                )
        kwargs.update(c.engine_kwargs)
        return AsyncEngineArgs(**kwargs)

    def _build(self, args: Any) -> Any:
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        # What AsyncLLM.from_engine_args does, with one step between: the scheduler class
        # must match the *resolved* async_scheduling (the platform hook decides it while the
        # config is created; the CPU platform turns it off).
        vllm_config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
        transfer = vllm_config.kv_transfer_config
        self.kv_connector = getattr(transfer, "kv_connector", None) if transfer else None
        self.scheduler_cls = self._plug_scheduler(vllm_config)
        return AsyncLLM.from_vllm_config(
            vllm_config,
            stat_loggers=[make_stats_sink(self._on_stats, self._on_preemptions)],
            enable_log_requests=args.enable_log_requests,
            disable_log_stats=args.disable_log_stats,
        )

    def _plug_scheduler(self, vllm_config: Any) -> str | None:
        sched = vllm_config.scheduler_config
        if not self.config.preempt_for_priority or self.config.scheduling_policy != "priority":
            return _qualname(sched.scheduler_cls)
        if sched.scheduler_cls is not None:
            log.warning(
                "engine_kwargs set scheduler_cls=%s: the preemptive scheduler is not used",
                sched.scheduler_cls,
            )
            return _qualname(sched.scheduler_cls)
        # Imported here, in the parent, so an incompatible vLLM fails now with the guard's
        # message instead of inside the engine core process.
        from vllm.platforms import current_platform

        from worker.engine.vllm_guard import default_chunk_tokens
        from worker.engine.vllm_preempt import install

        chunk, cost = self.config.guard_chunk_tokens, self.config.phase_cost
        if chunk is None:
            chunk = default_chunk_tokens(current_platform.is_cuda_alike())
        return install(
            vllm_config,
            self.config.preempt_priority_gap,
            chunk,
            self.config.guard_hold_s,
            phase_period_s=self.config.phase_period_s,
            phase_offset_s=self.config.phase_offset_s,
            phase_cost=None if cost is None else dict(cost),
        )

    @property
    def supports_kv_offload(self) -> bool:
        """True once started with a CPU offloading connector (CUDA builds, kv_offload_gib set,
        or one passed in engine_kwargs): preempted requests' KV stays in CPU memory."""
        return self.kv_connector in _OFFLOAD_CONNECTORS

    def _on_stats(self, sched: Any) -> None:
        self._last_sched = sched
        active = getattr(sched, "num_running_reqs", 0) + getattr(sched, "num_waiting_reqs", 0)
        busy = int(active) > 0
        self.step_clock.tick(time.time(), busy)

    def _on_preemptions(self, n: int) -> None:
        self._num_preemptions += n

    async def shutdown(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            for rid in list(self._inflight):
                await llm.abort(rid)
            self._inflight.clear()
            llm.shutdown()

    # ---- requests --------------------------------------------------------------------------

    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenDelta, None]:
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        llm = self._llm
        if llm is None:
            raise EngineNotStarted("engine is not running")
        validate_request(request, self.config.max_model_len,
                         structured_outputs=self.supports_structured_outputs)
        sp = request.sampling
        try:
            params = SamplingParams(
                structured_outputs=to_vllm(sp.structured) if sp.structured else None,
                max_tokens=sp.max_tokens,
                temperature=sp.temperature,
                top_p=sp.top_p,
                seed=sp.seed,
                stop=list(sp.stop) or None,
                ignore_eos=sp.ignore_eos,
                detokenize=True,
                output_kind=RequestOutputKind.DELTA,
            )
        except (VLLMClientError, ValueError) as exc:  # vLLM's own checks on the settings
            raise EngineError(str(exc)) from exc
        # vLLM refuses a non-zero priority under the fcfs policy.
        priority = request.priority if self.config.scheduling_policy == "priority" else 0
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        if request.cache_salt is not None:
            prompt["cache_salt"] = request.cache_salt
        lora_request = await self._lora_request(request.lora)
        num_prompt = len(request.prompt_token_ids)
        finished = False
        cached = 0
        self._inflight.add(request.request_id)
        try:
            stream = llm.generate(prompt, params, request.request_id, priority=priority,
                                  lora_request=lora_request)
            try:
                async for out in stream:
                    comp = out.outputs[0]
                    finished = bool(out.finished)
                    # Reported on every output in practice; keep the largest in case not.
                    cached = max(cached, int(out.num_cached_tokens or 0))
                    if out.prompt_token_ids is not None:
                        num_prompt = len(out.prompt_token_ids)
                    yield TokenDelta(
                        token_ids=list(comp.token_ids),
                        text=comp.text,
                        finished=finished,
                        finish_reason=_reason(comp.finish_reason, request) if finished else None,
                        num_prompt_tokens=num_prompt,
                        num_cached_tokens=cached,
                    )
            except VLLMClientError as exc:
                raise EngineError(str(exc)) from exc
        finally:
            self._inflight.discard(request.request_id)
            if not finished:
                # The consumer went away (closed or cancelled) or the stream broke: make sure
                # vLLM frees the slot now rather than whenever the inner stream is collected.
                with contextlib.suppress(Exception):
                    await llm.abort(request.request_id)
        if not finished:
            # The stream ended without a final output (an abort raced the last step).
            yield TokenDelta([], "", True, FINISH_ABORT, num_prompt, cached)

    async def abort(self, request_id: str) -> None:
        llm = self._llm
        # Drop it from our count first: stats() must reflect the abort at once.
        self._inflight.discard(request_id)
        if llm is not None:
            await llm.abort(request_id)

    def stats(self) -> EngineStats:
        n = len(self._inflight)
        s = self._last_sched
        if n == 0 or s is None:
            # Idle (vLLM counts prefix-cached blocks of finished requests as free, too).
            running, kv = min(n, self.config.max_num_seqs), 0.0
        else:
            running = min(int(s.num_running_reqs), n)
            kv = float(s.kv_cache_usage)
        # The rest are queued in vLLM, or so new that no snapshot has seen them yet.
        waiting = n - running
        return EngineStats(
            num_running=running,
            num_waiting=waiting,
            kv_usage=min(max(kv, 0.0), 1.0),
            max_num_seqs=self.config.max_num_seqs,
            kv_capacity_tokens=self._kv_capacity_tokens,
            num_preemptions=self._num_preemptions,
        )

    # ---- adapters --------------------------------------------------------------------------

    async def _lora_request(self, spec: LoraSpec | None) -> Any:
        """vLLM's LoRARequest for ``spec``, the adapter loaded first (once: AdapterLoads)."""
        if spec is None:
            return None
        if self.adapter_loads is None:
            raise UnsupportedParameter("model", "This worker serves no LoRA adapters.")
        await self.adapter_loads.ensure(spec)
        return _to_vllm_lora(spec)

    async def _load_adapter(self, spec: LoraSpec) -> None:
        # add_lora reads the folder and puts the weights in vLLM's CPU adapter cache, so the
        # first request does not pay for it inside an engine step (and a bad adapter fails
        # here, for its own request only).
        try:
            await self._llm.add_lora(_to_vllm_lora(spec))
        except (ValueError, RuntimeError, OSError) as exc:
            raise AdapterLoadFailed(f"Adapter {spec.adapter_id} could not be loaded: "
                                    f"{exc}") from exc

    async def _unload_adapter(self, spec: LoraSpec) -> None:
        if self._llm is not None:
            await self._llm.remove_lora(spec.int_id)

    # ---- tokenizer -------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            # Usable before start(): the API side may tokenize without an engine running.
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.config.model_path)
        return self._tokenizer

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        # Render to text, then encode without adding specials: the template already has them
        # (this is what vLLM's own chat endpoint does).
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))


_OFFLOAD_CONNECTORS = ("OffloadingConnector", "SimpleCPUOffloadConnector")


def _to_vllm_lora(spec: LoraSpec) -> Any:
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=spec.adapter_id, lora_int_id=spec.int_id, lora_path=spec.path)


def _kv_offload_config(gib: float, platform: Any) -> Any:
    """vLLM's KV offloading connector to CPU memory, or None where the platform cannot run it
    (vLLM 0.32's CPUOffloadingSpec refuses anything but CUDA-alike and XPU GPUs; we wire CUDA,
    the only GPU we ship for)."""
    if not platform.is_cuda():
        return None
    from vllm.config import KVTransferConfig

    return KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": int(gib * _GIB)},
    )


def _structured_outputs_available(vllm_config: Any) -> bool:
    from vllm.platforms import current_platform

    return structured_outputs_available(vllm_config, current_platform)


def _qualname(cls: Any) -> str | None:
    if cls is None or isinstance(cls, str):
        return cls
    return f"{cls.__module__}.{cls.__qualname__}"


def _reason(reason: Any, request: EngineRequest) -> str:
    r = str(reason) if reason is not None else FINISH_ABORT
    if r in ("stop", "length", "abort"):
        return r
    # e.g. "error": the engine failed this request. Not the client's fault, so not an
    # EngineError: the worker retries it.
    raise RuntimeError(f"vLLM finished request {request.request_id} with reason {r!r}")
