"""A simulated inference engine: continuous batching with chunked prefill, a KV budget,
engine-side priority, prefix cache and abort, timed by a ``CostModel``.

Steps that contain prefill run one at a time. Once every running sequence is decoding, the
engine jumps straight to the next sequence finishing (``CostModel.decode_run_s`` is exact for
the linear step model), so a job costs O(1) events however long its output. An arrival or an
abort during such a run cuts it at the step boundary after "now", as a real engine would pick
new work up at its next iteration.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from scheduler.cost_model import CostModel


@dataclass(slots=True)
class Seq:
    job_id: str
    tenant: str
    is_realtime: bool
    arrival: float
    prompt: int  # tokens to prefill, previously generated output included on resume
    target: int  # output tokens this run produces before it finishes
    kv_need: int  # KV reserved while running: prompt + max_tokens
    prefix_key: str | None = None
    prefix_tokens: int = 0
    prefilled: int = 0
    generated: int = 0  # output tokens of this run (since the last prefill)
    done_before: int = 0  # output tokens from runs an engine-side preemption ended
    first_token: bool = False

    @property
    def total_output(self) -> int:
        return self.done_before + self.generated

    @property
    def decoding(self) -> bool:
        return self.prefilled >= self.prompt


@dataclass(slots=True)
class StepResult:
    """What one step (or one jump of decode steps) produced."""

    start: float
    end: float
    first_tokens: list[Seq] = field(default_factory=list)
    finished: list[Seq] = field(default_factory=list)
    aborted: list[Seq] = field(default_factory=list)
    served: list[tuple[str, int, int]] = field(default_factory=list)  # tenant, in, out
    engine_preemptions: int = 0


class SimEngine:
    def __init__(
        self,
        cost: CostModel,
        *,
        priority: bool = True,
        preempt_for_realtime: bool = True,
        prefix_cache_entries: int = 64,
        isolate_realtime_prefill: bool = False,
    ) -> None:
        self.cost = cost
        self.priority = priority  # realtime first in the waiting queue (vLLM priority)
        self.preempt_for_realtime = preempt_for_realtime  # vLLM V1 alone: False
        # Fairway's engine-side fix: while a realtime prompt is prefilling, batch prompts get
        # no prefill budget, so the realtime first token waits for decode only.
        self.isolate_realtime_prefill = isolate_realtime_prefill
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.kv_used = 0
        self.busy_s = 0.0
        self.epoch = 0  # bumps when the planned step end changes; stale events are ignored
        self.step_end: float | None = None
        self._plan: tuple[float, int, int, dict[str, int]] | None = None  # start, n, N, chunks
        self._abort: set[str] = set()
        self._cache: OrderedDict[str, None] = OrderedDict()
        self._cache_size = prefix_cache_entries
        self._pending_preemptions = 0

    # -- inputs --------------------------------------------------------------------------

    def add(self, seq: Seq, now: float) -> bool:
        """Queue a sequence; True when the caller must (re)schedule this engine's step end."""
        self.waiting.append(seq)
        return self._cut(now)

    def abort(self, job_id: str, now: float) -> tuple[Seq | None, bool]:
        """A waiting sequence leaves at once (returned); a running one at the step end.

        The flag says whether the caller must (re)schedule this engine's step end."""
        for i, seq in enumerate(self.waiting):
            if seq.job_id == job_id:
                del self.waiting[i]
                return seq, False
        if any(s.job_id == job_id for s in self.running):
            self._abort.add(job_id)
            return None, self._cut(now)
        return None, False

    def num_seqs(self) -> int:
        return len(self.running) + len(self.waiting)

    def progress(self) -> dict[str, int]:
        return {s.job_id: s.generated for s in self.running}

    # -- stepping ------------------------------------------------------------------------

    def start(self, now: float) -> float | None:
        """Plan the next step from ``now``; returns its end time, or None when idle."""
        self._admit()
        decode = [s for s in self.running if s.decoding]
        prefill = [s for s in self.running if not s.decoding]
        if self.priority:  # vLLM's priority scheduler keeps running requests in priority order
            prefill.sort(key=lambda s: (not s.is_realtime, s.arrival))
        if self.isolate_realtime_prefill and any(s.is_realtime for s in prefill):
            prefill = [s for s in prefill if s.is_realtime]
        if not self.running:
            self.step_end, self._plan = None, None
            return None
        ctx = sum(s.prompt + s.generated for s in decode)
        if prefill:
            budget = max(0, self.cost.token_budget - len(decode))
            chunks: dict[str, int] = {}
            for seq in prefill:
                take = min(seq.prompt - seq.prefilled, budget)
                if take > 0:
                    chunks[seq.job_id] = take
                    budget -= take
            tokens = sum(chunks.values())
            duration = self.cost.step_s(len(decode), ctx, tokens)
            self._plan = (now, len(decode), 1, chunks)
        else:
            steps = min(s.target - s.generated for s in decode)
            duration = self.cost.decode_run_s(len(decode), ctx, steps)
            self._plan = (now, len(decode), steps, {})
        self.epoch += 1
        self.step_end = now + duration
        return self.step_end

    def finish_step(self) -> StepResult:
        """Apply the planned step at its end time."""
        assert self._plan is not None and self.step_end is not None
        start, _, steps, chunks = self._plan
        result = StepResult(start, self.step_end, engine_preemptions=self._pending_preemptions)
        self._pending_preemptions = 0
        self.busy_s += self.step_end - start
        for seq in self.running:
            if seq.decoding:
                seq.generated += steps
                result.served.append((seq.tenant, 0, steps))
            elif seq.job_id in chunks:
                seq.prefilled += chunks[seq.job_id]
                result.served.append((seq.tenant, chunks[seq.job_id], 0))
                if seq.decoding:  # the last chunk also samples a token
                    seq.generated += 1
                    result.served.append((seq.tenant, 0, 1))
                    if not seq.first_token:
                        seq.first_token = True
                        result.first_tokens.append(seq)
        keep: list[Seq] = []
        for seq in self.running:
            if seq.job_id in self._abort:
                result.aborted.append(seq)
            elif seq.generated >= seq.target:
                result.finished.append(seq)
            else:
                keep.append(seq)
                continue
            self.kv_used -= seq.kv_need
        self.running = keep
        self._abort.clear()
        self._plan, self.step_end = None, None
        return result

    # -- internals -----------------------------------------------------------------------

    def _cut(self, now: float) -> bool:
        """Idle: start now. In a decode jump: end it at the step boundary after ``now``."""
        if self._plan is None:
            return True
        start, n, steps, chunks = self._plan
        if chunks or steps <= 1:
            return False  # a single step: the change applies when it ends
        ctx = sum(s.prompt + s.generated for s in self.running if s.decoding)
        done = self.cost.decode_steps_within(n, ctx, now - start)
        cut = min(steps, done + 1)
        if cut == steps:
            return False
        self._plan = (start, n, cut, chunks)
        self.step_end = start + self.cost.decode_run_s(n, ctx, cut)
        self.epoch += 1
        return True

    def _admit(self) -> None:
        if self.priority:
            self.waiting.sort(key=lambda s: (not s.is_realtime, s.arrival))
        while self.waiting:
            seq = self.waiting[0]
            if not self._fits(seq) and not self._make_room(seq):
                break
            self.waiting.pop(0)
            self._cached_prefix(seq)
            self.running.append(seq)
            self.kv_used += seq.kv_need

    def _fits(self, seq: Seq) -> bool:
        return (
            len(self.running) < self.cost.max_slots
            and self.kv_used + seq.kv_need <= self.cost.kv_capacity_tokens
        )

    def _make_room(self, seq: Seq) -> bool:
        """Engine-side preemption (recompute): batch makes way for a waiting realtime seq."""
        if not (seq.is_realtime and self.preempt_for_realtime):
            return False
        while not self._fits(seq):
            victims = [s for s in self.running if not s.is_realtime]
            if not victims:
                return False
            victim = min(victims, key=lambda s: (s.generated, -s.arrival))
            self.running.remove(victim)
            self.kv_used -= victim.kv_need
            victim.prompt += victim.generated
            victim.target -= victim.generated
            victim.done_before += victim.generated
            victim.prefilled = victim.generated = 0
            self.waiting.append(victim)
            self._pending_preemptions += 1
        return True

    def _cached_prefix(self, seq: Seq) -> None:
        if seq.prefix_key is None:
            return
        if seq.prefix_key in self._cache:
            self._cache.move_to_end(seq.prefix_key)
            seq.prefilled = min(seq.prefix_tokens, seq.prompt - 1)
        else:
            self._cache[seq.prefix_key] = None
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
