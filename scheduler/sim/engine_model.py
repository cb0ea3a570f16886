"""The simulator's model of an inference engine (``EngineModel``; not the deterministic engine
the workers run, ``worker.engine.sim.SimEngine``): continuous batching with chunked prefill, a
KV budget, engine-side priority, prefix cache and abort, timed by a ``CostModel``.

Steps that contain prefill run one at a time. Once every running sequence is decoding, the
engine jumps straight to the next sequence finishing (``CostModel.decode_run_s`` is exact for
the linear step model), so a job costs O(1) events however long its output. An arrival or an
abort during such a run cuts it at the step boundary after "now", as a real engine would pick
new work up at its next iteration.

Preemption modes (``preemption_mode``, docs/preemption.md). A victim (of the engine's own
preemption for realtime, or of the policy's Preempt, which aborts it here) either:

- ``recompute``: drops its KV; its resume prefills prompt + generated tokens again, less the
  prefix cache (its ``prefix_key``) or ``prefix_hit_fraction`` of that context, whichever saves
  more. The prefill paid again adds up in ``recomputed_tokens``.
- ``swap``: moves its KV to CPU memory (swap-out) and back when it is admitted here again
  (swap-in), each at ``CostModel.swap_s``, and skips that prefill. The transfer time is added
  to this engine's next step (conservative: vLLM's offloading connector overlaps its copies
  with compute). A job the policy resumes on another worker finds no KV there and recomputes.
  A profile that cannot offload (``swap_per_token_s=None``, the CPU one) falls back to
  recompute, and ``mode_fallback`` says why.

Realtime guard (``realtime_guard``, Fairway's engine scheduler; the same rules, from
``scheduler.engine_rules``, run on vLLM in ``worker.engine.vllm_guard``): a step that
prefills a realtime prompt carries realtime work only (batch decodes and prefills wait one
step, at most ``MAX_ALONE_STEPS`` in a row), and while realtime was seen within
``guard_hold_s`` batch prefill takes at most ``guard_chunk_tokens`` per step, so the step a
realtime arrival must wait out stays short. docs/scheduler.md, "Realtime guard", has the
figures. With a ``phase`` grid (``scheduler.step_phase``) that cap instead sizes each guarded
step's batch chunk (up to ``phase_chunk_limit`` of it) so the step ends on the engine's next
grid point.

LoRA adapters (``lora``, scheduler.sim.adapters): a sequence with an adapter starts only when
its adapter can take a slot (``max_loras`` distinct per batch) and is loaded; otherwise it is
skipped and the queue behind it goes on, as vLLM's scheduler does. While only such sequences
wait, the engine idles until the next load ends; a decode run ends at the first step after it.
"""

from __future__ import annotations

from collections import OrderedDict

from scheduler.cost_model import CostModel
from scheduler.engine_rules import GUARD_HOLD_S, MAX_ALONE_STEPS, phase_chunk_limit
from scheduler.sim.adapters import AdapterCache, LoraSettings
from scheduler.sim.seq import Seq, StepResult
from scheduler.step_phase import PhaseGrid, chunk_for_grid

RECOMPUTE, SWAP = "recompute", "swap"


class EngineModel:
    def __init__(
        self,
        cost: CostModel,
        *,
        priority: bool = True,
        preempt_for_realtime: bool = True,
        prefix_cache_entries: int = 64,
        prefix_cache_tokens: int | None = None,
        realtime_guard: bool = False,
        guard_chunk_tokens: int | None = None,
        guard_hold_s: float = GUARD_HOLD_S,
        preemption_mode: str = RECOMPUTE,
        prefix_hit_fraction: float = 0.0,
        phase: PhaseGrid | None = None,
        lora: LoraSettings | None = None,
    ) -> None:
        if preemption_mode not in (RECOMPUTE, SWAP):
            raise ValueError(f"preemption_mode must be {RECOMPUTE!r} or {SWAP!r}")
        if not 0.0 <= prefix_hit_fraction < 1.0:
            raise ValueError("prefix_hit_fraction must be in [0, 1)")
        self.cost = cost
        self.mode, self.mode_fallback = preemption_mode, None
        if preemption_mode == SWAP and not cost.can_swap:
            self.mode = RECOMPUTE
            self.mode_fallback = "profile cannot offload KV (swap_per_token_s=None)"
        self.prefix_hit_fraction = prefix_hit_fraction
        self.recomputed_tokens = 0  # prefill re-paid by resumed sequences
        self.swapped_tokens = 0  # KV tokens moved between GPU and CPU, both ways
        self.swap_s = 0.0  # time those transfers took
        self.swapped_out: dict[str, int] = {}  # job id -> KV tokens parked in CPU memory
        self._transfer_s = 0.0  # swap time charged to the next step
        self._plan_transfer_s = 0.0  # ... and to the planned one
        self.priority = priority  # realtime first in the waiting queue (vLLM priority)
        self.preempt_for_realtime = preempt_for_realtime  # vLLM V1 alone: False
        self.realtime_guard = realtime_guard
        self.guard_chunk_tokens = (
            guard_chunk_tokens if guard_chunk_tokens is not None else cost.guard_chunk_tokens()
        )
        if self.guard_chunk_tokens < 1:
            raise ValueError("guard_chunk_tokens must be >= 1")
        self.guard_hold_s = guard_hold_s
        self.phase = phase  # step phase lock (guarded steps only)
        # An engine starts guarded: it cannot know whether realtime is coming until it sees
        # some, and a batch-only engine drops the cap after one quiet hold.
        self._realtime_seen = 0.0
        self._paused: set[str] = set()  # decoding seqs the planned step leaves out
        self._alone_run = 0  # realtime-alone steps in a row (MAX_ALONE_STEPS bounds it)
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
        # Block cache for sequences with hash_ids: block -> its tokens, LRU, at most
        # prefix_cache_tokens (default: the KV capacity, as vLLM keeps freed blocks cached
        # until their room is needed; an upper bound, running sequences share that room).
        self._blocks: OrderedDict[int, int] = OrderedDict()
        self._block_tokens_cached = 0
        self._block_room = (
            cost.kv_capacity_tokens if prefix_cache_tokens is None else prefix_cache_tokens
        )
        self.prefix_hit_tokens = 0  # prefill the prefix cache saved (first runs and resumes)
        self._pending_preemptions = 0
        self.adapters = AdapterCache(lora) if lora is not None else None
        self._load_wait = False  # the planned "step" is an idle wait for an adapter load

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
                if seq.swapped_kv:  # its KV stays in CPU memory for a resume here
                    self.swapped_out[job_id] = seq.swapped_kv
                    seq.swapped_kv = 0
                return seq, False
        if any(s.job_id == job_id for s in self.running):
            self._abort.add(job_id)
            return None, self._cut(now)
        return None, False

    def num_seqs(self) -> int:
        return len(self.running) + len(self.waiting)

    def progress(self) -> dict[str, int]:
        return {s.job_id: s.generated for s in self.running}

    def step_clock(self) -> tuple[float | None, float]:
        """(start of the planned step or decode run, seconds per step); (None, 0) when idle.
        A decode run's steps are averaged: they grow only by the context each adds."""
        if self._plan is None or self.step_end is None or self._load_wait:
            return None, 0.0
        start, _, steps, _ = self._plan
        start += self._plan_transfer_s  # swap transfers run before the steps
        return start, (self.step_end - start) / max(1, steps)

    def forget(self, job_id: str) -> None:
        """The job resumed elsewhere or finished: free its swapped KV here."""
        self.swapped_out.pop(job_id, None)

    # -- stepping ------------------------------------------------------------------------

    def start(self, now: float) -> float | None:
        """Plan the next step from ``now``; returns its end time, or None when idle."""
        self._admit(now)
        decode = [s for s in self.running if s.decoding]
        prefill = [s for s in self.running if not s.decoding]
        if self.priority:  # vLLM's priority scheduler keeps running requests in priority order
            prefill.sort(key=lambda s: (not s.is_realtime, s.arrival))
        batch_cap: int | None = None
        if self.realtime_guard:
            if any(s.is_realtime for s in self.running):
                self._realtime_seen = now
            if any(s.is_realtime for s in prefill) and self._alone_run < MAX_ALONE_STEPS:
                self._alone_run += 1
                prefill = [s for s in prefill if s.is_realtime]
                paused = [s for s in decode if not s.is_realtime]
                decode = [s for s in decode if s.is_realtime]
                self._paused = {s.job_id for s in paused}
            else:
                self._alone_run = 0
                if now - self._realtime_seen <= self.guard_hold_s:
                    batch_cap = self.guard_chunk_tokens
        wake = self.adapters.next_ready(now) if self.adapters is not None else None
        if not self.running:
            self.step_end, self._plan = None, None
            self._transfer_s = 0.0  # a swap-out on an engine going idle overlaps the idle time
            if wake is None or not self.waiting:
                return None
            self._load_wait, self._plan = True, (now, 0, 1, {})
            self.epoch += 1
            self.step_end = wake
            return wake
        ctx = sum(s.prompt + s.generated for s in decode)
        if prefill and batch_cap is not None and self.phase is not None:
            fixed = self.cost.step_s(len(decode), ctx, 0) + self._transfer_s
            batch_cap = chunk_for_grid(
                self.phase, now, fixed, self.cost.prefill_per_token_s, phase_chunk_limit(batch_cap)
            )
        if prefill:
            budget = max(0, self.cost.token_budget - len(decode))
            chunks: dict[str, int] = {}
            for seq in prefill:
                take = min(seq.prompt - seq.prefilled, budget)
                if batch_cap is not None and not seq.is_realtime:
                    take = min(take, batch_cap)
                    batch_cap -= take
                if take > 0:
                    chunks[seq.job_id] = take
                    budget -= take
            tokens = sum(chunks.values())
            duration = self.cost.step_s(len(decode), ctx, tokens)
            self._plan = (now, len(decode), 1, chunks)
        else:
            steps = min(s.target - s.generated for s in decode)
            if wake is not None and self.waiting:  # look at the queue once the load ends
                steps = min(steps, self.cost.decode_steps_within(len(decode), ctx, wake - now) + 1)
            duration = self.cost.decode_run_s(len(decode), ctx, steps)
            self._plan = (now, len(decode), steps, {})
        # Swap transfers queued since the last step hold this one up.
        self._plan_transfer_s, self._transfer_s = self._transfer_s, 0.0
        duration += self._plan_transfer_s
        self.epoch += 1
        self.step_end = now + duration
        return self.step_end

    def finish_step(self) -> StepResult:
        """Apply the planned step at its end time."""
        assert self._plan is not None and self.step_end is not None
        start, _, steps, chunks = self._plan
        result = StepResult(start, self.step_end, engine_preemptions=self._pending_preemptions)
        self._pending_preemptions = 0
        if not self._load_wait:
            self.busy_s += self.step_end - start
        self._load_wait = False
        for seq in self.running:
            if seq.job_id in self._paused:
                continue
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
                if self.mode == SWAP:  # the policy took it back: its KV goes to CPU memory
                    self.swapped_out[seq.job_id] = self._swap_out(seq)
            elif seq.generated >= seq.target:
                result.finished.append(seq)
            else:
                keep.append(seq)
                continue
            self.kv_used -= seq.kv_need
        self.running = keep
        self._abort.clear()
        self._paused.clear()
        self._plan, self.step_end = None, None
        self._plan_transfer_s = 0.0
        return result

    # -- internals -----------------------------------------------------------------------

    def _cut(self, now: float) -> bool:
        """Idle: start now. In a decode jump: end it at the step boundary after ``now``."""
        if self._plan is None:
            return True
        if self._load_wait:  # idle until a load ends: start now instead
            self._plan, self.step_end, self._load_wait = None, None, False
            self.epoch += 1
            return True
        start, n, steps, chunks = self._plan
        if chunks or steps <= 1:
            return False  # a single step: the change applies when it ends
        ctx = sum(s.prompt + s.generated for s in self.running if s.decoding)
        lead = self._plan_transfer_s  # swap transfers run before the decode steps
        done = self.cost.decode_steps_within(n, ctx, now - start - lead)
        cut = min(steps, done + 1)
        if cut == steps:
            return False
        self._plan = (start, n, cut, chunks)
        self.step_end = start + lead + self.cost.decode_run_s(n, ctx, cut)
        self.epoch += 1
        return True

    def _admit(self, now: float) -> None:
        if self.priority:
            self.waiting.sort(key=lambda s: (not s.is_realtime, s.arrival))
        i = 0
        while i < len(self.waiting):
            seq = self.waiting[i]
            adapters = self.adapters
            if seq.adapter is not None and adapters is not None and not adapters.admits(
                seq.adapter, {s.adapter for s in self.running}, now
            ):
                i += 1  # no slot for its adapter, or it is loading: the queue behind goes on
                continue
            if not self._fits(seq) and not self._make_room(seq):
                break
            self.waiting.pop(i)
            self._restore(seq)
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
            if self.mode == SWAP:
                victim.swapped_kv = self._swap_out(victim)
            victim.resumed = True
            victim.computed_before = min(victim.prefilled, victim.prompt) + victim.generated
            victim.prompt += victim.generated
            victim.target -= victim.generated
            victim.done_before += victim.generated
            victim.prefilled = victim.generated = 0
            self.waiting.append(victim)
            self._pending_preemptions += 1
        return True

    def _swap_out(self, seq: Seq) -> int:
        """Charge moving ``seq``'s KV (what it has computed) to CPU memory; returns its tokens."""
        kv = min(seq.prefilled, seq.prompt) + seq.generated
        self._charge_swap(kv)
        return kv

    def _charge_swap(self, tokens: int) -> None:
        t = self.cost.swap_s(tokens)
        self._transfer_s += t
        self.swap_s += t
        self.swapped_tokens += tokens

    def _restore(self, seq: Seq) -> None:
        """On admission: swap a parked KV back in, or find what the prefix cache saves."""
        kv = seq.swapped_kv or self.swapped_out.pop(seq.job_id, 0)
        seq.swapped_kv = 0
        if kv and self.mode == SWAP:
            seq.prefilled = min(kv, seq.prompt)
            self._charge_swap(seq.prefilled)
        else:
            self._cached_prefix(seq)
            if seq.resumed and self.prefix_hit_fraction > 0:
                hit = min(int(self.prefix_hit_fraction * seq.prompt), seq.prompt - 1)
                seq.prefilled = max(seq.prefilled, hit)
        if seq.resumed:
            # Only context the preempted run had computed is re-paid; a prompt it had not
            # finished prefilling (chunked, or held back by the guard) was never paid.
            self.recomputed_tokens += max(0, min(seq.computed_before, seq.prompt) - seq.prefilled)
            seq.resumed = False

    def _cached_prefix(self, seq: Seq) -> None:
        if seq.hash_ids:
            self._cached_blocks(seq)
            return
        if seq.prefix_key is None:
            return
        if seq.prefix_key in self._cache:
            self._cache.move_to_end(seq.prefix_key)
            before = seq.prefilled
            seq.prefilled = min(seq.prefix_tokens, seq.prompt - 1)
            self.prefix_hit_tokens += max(0, seq.prefilled - before)
        else:
            self._cache[seq.prefix_key] = None
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _cached_blocks(self, seq: Seq) -> None:
        """Reuse the longest run of leading blocks cached here (vLLM's automatic prefix
        caching: a block is reusable only after every block before it), then cache all of
        the prompt's blocks, most recent last. Block i covers prompt tokens
        [i * block_tokens, (i + 1) * block_tokens); the last one may be partial."""
        size = max(1, seq.block_tokens)
        hits = 0
        for h in seq.hash_ids:
            if h not in self._blocks:
                break
            hits += 1
        # At least the last prompt token is computed: it samples the first output token.
        cached = min(hits * size, seq.prompt - 1)
        before = seq.prefilled
        seq.prefilled = max(seq.prefilled, cached)
        self.prefix_hit_tokens += max(0, seq.prefilled - before)
        for i, h in enumerate(seq.hash_ids):
            if h in self._blocks:
                self._blocks.move_to_end(h)
                continue
            tokens = max(0, min(size, seq.prompt - i * size))
            self._blocks[h] = tokens
            self._block_tokens_cached += tokens
        while self._block_tokens_cached > self._block_room and self._blocks:
            _, tokens = self._blocks.popitem(last=False)
            self._block_tokens_cached -= tokens
