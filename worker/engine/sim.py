"""A deterministic simulated engine that schedules like vLLM V1, without a model.

What it models, and why:
- A background step loop does continuous batching: each step spends a token budget on the
  running requests first (decodes take 1 token, prefills take chunks), then admits waiting
  requests in (priority, arrival) order, as vLLM V1's scheduler does. The waiting head blocks
  the queue, so a better priority is never starved by later, smaller requests.
- KV is counted in blocks of `block_size` tokens against `kv_capacity_tokens`. When a running
  request cannot grow, the worst running request (highest priority value, then latest arrival)
  is preempted by recompute: its blocks are freed and it waits again with its output kept.
- With ``preempt_for_priority`` (the default, as Fairway's vLLM scheduler does, see
  `worker.engine.vllm_preempt`), a waiting request whose priority beats the worst running
  one's by ``preempt_priority_gap`` preempts the worst running ones (recompute) at the start
  of a step until it fits, so it is admitted in that step. False is vLLM's own behaviour
  ("vLLM priority alone"): a waiting request never preempts running ones
  (vllm-project/vllm#40004).
- Full blocks are hashed and kept after release (prefix caching), so a resumed or repeated
  prompt skips most of its prefill; `num_cached_tokens` reports that, as vLLM does.
- Step time is a cost model, `base + per_prefill_token * n_prefill + per_decode_seq *
  n_decode`, slept for `step_s / speed` of wall time (speed=inf: just yield). `sim_time_s`
  adds up the unscaled step times, for the simulator.
- The next token is a hash of the whole context (prompt + output so far), so resuming from
  prompt + generated tokens continues exactly like an uninterrupted run. Sampling settings
  other than the seed are ignored; a seed changes the output only when temperature > 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import AsyncGenerator
from typing import Any

from worker.engine.base import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    EngineNotStarted,
    EngineRequest,
    EngineStats,
    TokenDelta,
    UnsupportedParameter,
    validate_request,
)
from worker.engine.config import SimEngineConfig
from worker.engine.lora import AdapterLoads, LoraSpec
from worker.engine.sim_sched import SimRequest, SimScheduler, mix64
from worker.engine.sim_tokenizer import SimTokenizer
from worker.engine.step_clock import StepClock


class SimEngine:
    """See the module docstring; ``config`` defaults to `SimEngineConfig()`. Its queues, KV
    blocks and preemptions are its `SimScheduler`'s."""

    # No KV offloading: a preemption always drops the KV (recompute), so the worker's "swap"
    # mode falls back to recompute here (`worker.engine.base.supports_kv_offload`).
    supports_kv_offload = False
    # No structured outputs: there is no model to constrain, so a request with a JSON
    # response_format is refused (UnsupportedParameter), never answered with free text.
    supports_structured_outputs = False

    def __init__(self, config: SimEngineConfig | None = None) -> None:
        c = self.config = config or SimEngineConfig()
        self.model_name = c.model_name
        self.max_model_len = c.max_model_len
        self.step_base_s = c.step_base_s
        self.per_prefill_token_s = c.per_prefill_token_s
        self.per_decode_seq_s = c.per_decode_seq_s
        self.speed = c.speed  # tests may change it while running
        self.eos_threshold = int(c.eos_probability * (1 << 32))
        self.tokenizer = SimTokenizer()
        self._scheduler = SimScheduler(
            max_num_seqs=c.max_num_seqs, token_budget=c.token_budget, block_size=c.block_size,
            kv_blocks=c.kv_capacity_tokens // c.block_size,
            enable_prefix_caching=c.enable_prefix_caching,
            preempt_for_priority=c.preempt_for_priority,
            preempt_priority_gap=c.preempt_priority_gap, sample=self._sample)
        self._reqs: dict[str, SimRequest] = {}
        self._arrivals = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Observability for tests and the simulator.
        self.num_steps = 0
        self.sim_time_s = 0.0
        self.peak_kv_blocks = 0
        self.peak_running = 0
        self.step_clock = StepClock()
        # Adapters load once each after a modelled delay (worker.engine.lora); None: LoRA off.
        self.adapter_loads = None if c.lora is None else AdapterLoads(
            c.lora, load=self._load_adapter, unload=self._unload_adapter)

    @property
    def num_preemptions(self) -> int:
        """All recompute preemptions."""
        return self._scheduler.num_preemptions

    @property
    def num_priority_preemptions(self) -> int:
        """The preemptions a waiting, better request caused."""
        return self._scheduler.num_priority_preemptions

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._loop(), name=f"sim-engine:{self.model_name}")

    async def shutdown(self) -> None:
        for r in list(self._reqs.values()):
            self._finish(r, FINISH_ABORT)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ---- public API ------------------------------------------------------------------------

    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenDelta, None]:
        if self._task is None or self._task.done():
            raise EngineNotStarted("engine is not running")
        validate_request(request, self.max_model_len,
                         structured_outputs=self.supports_structured_outputs)
        if request.request_id in self._reqs:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.lora is not None:
            if self.adapter_loads is None:
                raise UnsupportedParameter("model", "This worker serves no LoRA adapters.")
            await self.adapter_loads.ensure(request.lora)
        r = SimRequest(
            req=request,
            arrival=self._arrivals,
            queue=asyncio.Queue(),
            tokens=list(request.prompt_token_ids),
            num_prompt=len(request.prompt_token_ids),
            decoder=self.tokenizer.stream_decoder(),
            salt_root=_salt_root(request.cache_salt),
        )
        self._arrivals += 1
        if request.lora is not None:  # an adapter changes every next token, as a real one does
            r.hash = _salt_root(request.lora.adapter_id)
        for t in r.tokens:
            r.hash = mix64(r.hash ^ t)
        self._reqs[request.request_id] = r
        self._scheduler.add(r)
        self._wake.set()
        try:
            while True:
                delta = await r.queue.get()
                yield delta
                if delta.finished:
                    return
        finally:
            # The consumer went away (closed or cancelled): free the slot like vLLM does.
            if not r.finished:
                self._finish(r, FINISH_ABORT)

    async def abort(self, request_id: str) -> None:
        r = self._reqs.get(request_id)
        if r is not None:
            self._finish(r, FINISH_ABORT)

    def stats(self) -> EngineStats:
        s = self._scheduler
        return EngineStats(
            num_running=len(s.running),
            num_waiting=len(s.waiting),
            kv_usage=s.pool.used / s.pool.num_blocks,
            max_num_seqs=s.max_num_seqs,
            kv_capacity_tokens=s.pool.num_blocks * s.block_size,
            num_preemptions=s.num_preemptions,
        )

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        return self.tokenizer.encode_chat(messages)

    async def _load_adapter(self, spec: LoraSpec) -> None:
        assert self.config.lora is not None
        delay = self.config.lora.sim_load_s
        await asyncio.sleep(delay / self.speed if self.speed != math.inf else 0)

    async def _unload_adapter(self, spec: LoraSpec) -> None:
        return None

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_bos=True)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    # ---- scheduler -------------------------------------------------------------------------

    async def _loop(self) -> None:
        s = self._scheduler
        while True:
            if s.idle:
                self._wake.clear()
                await self._wake.wait()
                continue
            scheduled = s.schedule()
            n_prefill = sum(n for r, n in scheduled if not s.is_decode(r, n))
            n_decode = sum(1 for r, n in scheduled if s.is_decode(r, n))
            step_s = (
                self.step_base_s
                + self.per_prefill_token_s * n_prefill
                + self.per_decode_seq_s * n_decode
            )
            self.num_steps += 1
            self.sim_time_s += step_s
            self.peak_kv_blocks = max(self.peak_kv_blocks, s.pool.used)
            self.peak_running = max(self.peak_running, len(s.running))
            # The "forward pass": aborts may land while we sleep; apply skips those.
            await asyncio.sleep(step_s / self.speed if self.speed != math.inf else 0)
            s.apply(scheduled)
            self.step_clock.tick(time.time(), not s.idle)

    def _sample(self, r: SimRequest) -> None:
        sp = r.req.sampling
        x = r.hash
        if sp.temperature > 0 and sp.seed is not None:
            x ^= mix64(sp.seed + 1)
        x = mix64(x)
        tok = self.tokenizer.pick(x)
        is_eos = not sp.ignore_eos and (x >> 32) < self.eos_threshold
        if is_eos:
            tok = self.tokenizer.eos_id
        r.tokens.append(tok)
        r.hash = mix64(r.hash ^ tok)
        r.text += r.decoder(tok)
        reason: str | None = None
        stop_at = self._find_stop(r)
        if stop_at is not None:
            r.text, reason = r.text[:stop_at], FINISH_STOP
        elif is_eos:
            reason = FINISH_STOP
        elif r.num_output >= sp.max_tokens or len(r.tokens) >= self.max_model_len:
            reason = FINISH_LENGTH
        if reason is not None:
            self._finish(r, reason)
        else:
            self._emit(r, finished=False, reason=None)

    def _find_stop(self, r: SimRequest) -> int | None:
        stops = r.req.sampling.stop
        if not stops:
            return None
        # Only text that arrived with this token can complete a new match.
        start = max(0, r.sent_text - max(map(len, stops)))
        hits = [i for s in stops if s and (i := r.text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def _emit(self, r: SimRequest, *, finished: bool, reason: str | None) -> None:
        end = len(r.text)
        if not finished and r.req.sampling.stop:
            # Hold back text that might be the start of a stop string, as vLLM does.
            end -= max(map(len, r.req.sampling.stop)) - 1
        new_text = r.text[r.sent_text : max(end, r.sent_text)]
        r.sent_text += len(new_text)
        new_ids = r.tokens[r.num_prompt + r.sent_tokens :]
        r.sent_tokens += len(new_ids)
        if not finished and not new_ids:
            return
        r.queue.put_nowait(
            TokenDelta(
                token_ids=new_ids,
                text=new_text,
                finished=finished,
                finish_reason=reason,
                num_prompt_tokens=r.num_prompt,
                num_cached_tokens=r.num_cached,
            )
        )

    def _finish(self, r: SimRequest, reason: str) -> None:
        if r.finished:
            return
        r.finished = True
        self._scheduler.remove(r)
        del self._reqs[r.req.request_id]
        self._emit(r, finished=True, reason=reason)


def _salt_root(salt: str | None) -> int:
    """A stable 64-bit namespace for a cache salt (as vLLM mixes the salt into the first
    block's hash); 0, the shared namespace, without one."""
    if salt is None:
        return 0
    return int.from_bytes(hashlib.sha256(salt.encode()).digest()[:8], "big")
