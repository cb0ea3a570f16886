"""The realtime guard on vLLM's scheduler: keep the engine step a realtime request waits for short.

Layer 1 (``vllm_preempt``) gets a realtime request *into* the running batch within one step.
What it still pays under a batch flood is the steps themselves: vLLM fills every step's token
budget with batch prefill chunks (hundreds of ms on a GPU at 8192 tokens) and runs every batch
decode beside the realtime prefill. The guard changes two things, per step (three with a
phase grid):

1. **Realtime steps alone.** While a realtime request waits for admission or is still
   prefilling, the step carries realtime work only: running batch requests sit the step out
   (vLLM skips a running request whose ``next_decode_eligible_step`` is ahead, as it does for
   pipeline-parallel cadence) and no batch request is admitted (the active-request limit is
   held at what realtime needs). Batch loses one step of progress, not its KV; after
   ``MAX_ALONE_STEPS`` (8, ``scheduler.engine_rules``) such steps in a row the next is shared,
   so batch is never starved.
2. **Short batch prefill.** For ``hold_s`` after realtime was last seen (or after the engine
   started), batch prefill takes at most ``chunk_tokens`` per step in total: one running batch
   prefill continues (the others sit the step out), vLLM's ``long_prefill_token_threshold``
   caps it at the chunk, and the step's token budget is cut to the decodes plus the chunk, so
   newly admitted batch shares the rest.
3. **Step phase lock** (``fairway_phase_period_s`` > 0; ``scheduler.step_phase``). A realtime
   arrival waits out the step in flight on the worker whose step ends first; workers whose
   steps end together leave it nothing short to pick. So each worker keeps its step ends on
   a grid of its own (period common to the pool, offset from its phase slot): a capped
   step's batch chunk, up to twice ``chunk_tokens`` (``phase_chunk_limit``), is sized so the
   step ends on the next grid point, predicted from the profile's step costs times a learned
   correction (``PhaseLock``). A chunk of 0 pauses all batch prefill. The grid runs on
   wall-clock time, which workers on different hosts share through NTP. The simulator runs
   the same rule (``scheduler.sim.engine_model``, ``phase``).

"Realtime" is any request whose priority beats ``batch_priority``: by default Fairway's flex
tier (``scheduler.tiers``), the best priority the policy still treats as batch class
(preemptible, fair-shared as batch).
The simulator runs the same rules (``scheduler.sim.engine_model``, ``realtime_guard``), from the
same definitions (``scheduler.engine_rules``); the chunk default is the cost profile's
``CostModel.guard_chunk_tokens``: the H200 one's on a GPU (480), the CPU one's on CPU (64).

Everything changed for a step is put back when ``schedule()`` returns, so vLLM's own state
(configs, limits, per-request cadence) is never left altered.
"""

from __future__ import annotations

import time
from typing import Any

from scheduler.cost_profiles import CPU_SMOLLM2_135M, H200_LLAMA3_8B
from scheduler.engine_rules import GUARD_HOLD_S, MAX_ALONE_STEPS, phase_chunk_limit
from scheduler.step_phase import PhaseGrid, chunk_for_grid
from scheduler.tiers import FLEX_TIER

CHUNK_KEY = "fairway_guard_chunk_tokens"  # VllmConfig.additional_config; absent or 0: off
HOLD_KEY = "fairway_guard_hold_s"
BATCH_PRIORITY_KEY = "fairway_guard_batch_priority"
DEFAULT_HOLD_S = GUARD_HOLD_S
DEFAULT_BATCH_PRIORITY = FLEX_TIER  # the best priority that is still batch class
# The step phase lock (point 3): grid period and offset (s), and the profile's step costs.
PHASE_PERIOD_KEY = "fairway_phase_period_s"  # absent or 0: no lock
PHASE_OFFSET_KEY = "fairway_phase_offset_s"
PHASE_COST_KEY = "fairway_phase_cost"  # {name: seconds} for each of PHASE_COST_FIELDS
PHASE_COST_FIELDS = (  # scheduler.cost_model.CostModel's step coefficients
    "step_base_s",
    "decode_per_seq_s",
    "decode_per_ctx_token_s",
    "prefill_per_token_s",
)
CORRECTION_WEIGHT = 0.2  # EWMA weight of each measured / predicted step time
CORRECTION_RANGE = (0.25, 4.0)  # each ratio is clamped to this before it counts
wall_clock = time.time  # the phase grid's clock (tests replace it)
GPU_CHUNK_TOKENS = H200_LLAMA3_8B.guard_chunk_tokens()
CPU_CHUNK_TOKENS = CPU_SMOLLM2_135M.guard_chunk_tokens()

# Private attributes the guard reads or sets for one step (checked by vllm_preempt's guard).
INSTANCE_ATTRS = (
    "current_step",
    "max_num_active_reqs",
    "max_num_scheduled_tokens",
    "adaptive_long_prefill_threshold",
    "scheduler_config",
)
REQUEST_ATTRS = ("next_decode_eligible_step", "num_output_placeholders")


def default_chunk_tokens(cuda_alike: bool) -> int:
    return GPU_CHUNK_TOKENS if cuda_alike else CPU_CHUNK_TOKENS


def _pending(req: Any) -> int:
    """Tokens a running request still has to compute: 1 while decoding, more while prefilling."""
    return int(req.num_tokens_with_spec + req.num_output_placeholders - req.num_computed_tokens)


class PhaseLock:
    """Sizes a capped step's batch chunk so the step ends on this engine's grid point.

    Predictions use the profile's step costs scaled by ``correction``, an EWMA of measured /
    predicted step time. The measured time of a locked step is the interval from its
    ``schedule()`` call to the next one. With async scheduling (vLLM's default on GPUs)
    ``schedule()`` runs one step ahead of the GPU, so a step is sized while the previous one
    is still running: the lock then corrects with a step's lag (untested: no GPU here).
    """

    def __init__(self, grid: PhaseGrid, cost: dict[str, float]) -> None:
        missing = [f for f in PHASE_COST_FIELDS if f not in cost]
        if missing:
            raise ValueError(f"{PHASE_COST_KEY} lacks {missing}")
        self.grid = grid
        self.base_s, self.per_seq_s, self.per_ctx_s, self.per_token_s = (
            float(cost[f]) for f in PHASE_COST_FIELDS
        )
        if self.per_token_s <= 0:
            raise ValueError("prefill_per_token_s must be > 0 for the phase lock")
        self.correction = 1.0
        self.last_predicted_s = 0.0  # the profile's time for the last locked step (uncorrected)
        self._step: tuple[float, float] | None = None  # (start, predicted) awaiting its end

    def fixed_s(self, num_decode: int, ctx_tokens: int) -> float:
        """The profile's time for a step's work other than batch prefill."""
        return self.base_s + self.per_seq_s * num_decode + self.per_ctx_s * ctx_tokens

    def chunk(self, now: float, num_decode: int, ctx_tokens: int, max_tokens: int) -> int:
        c = self.correction
        fixed = self.fixed_s(num_decode, ctx_tokens) * c
        return chunk_for_grid(self.grid, now, fixed, self.per_token_s * c, max_tokens)

    def stepped(self, now: float, num_decode: int, ctx_tokens: int, prefill_tokens: int) -> None:
        """A locked step was scheduled at ``now`` with this work; an empty one teaches nothing."""
        if num_decode + prefill_tokens <= 0:
            return
        self.last_predicted_s = (
            self.fixed_s(num_decode, ctx_tokens) + self.per_token_s * prefill_tokens
        )
        self._step = (now, self.last_predicted_s)

    def observe(self, now: float, idle: bool) -> None:
        """``schedule()`` was called at ``now``: the last locked step, if any, ended. ``idle``:
        nothing was running, so the engine may have slept since; that interval is no step."""
        step, self._step = self._step, None
        if step is None or idle:
            return
        start, predicted = step
        lo, hi = CORRECTION_RANGE
        ratio = min(hi, max(lo, (now - start) / predicted))
        self.correction += CORRECTION_WEIGHT * (ratio - self.correction)


def _phase_lock(extra: dict[str, Any]) -> PhaseLock | None:
    period = float(extra.get(PHASE_PERIOD_KEY, 0.0) or 0.0)
    if period < 0:
        raise ValueError(f"{PHASE_PERIOD_KEY} must be >= 0")
    if period == 0:
        return None
    offset = float(extra.get(PHASE_OFFSET_KEY, 0.0) or 0.0) % period
    cost = extra.get(PHASE_COST_KEY)
    if not isinstance(cost, dict):
        raise ValueError(f"{PHASE_PERIOD_KEY} needs {PHASE_COST_KEY} (the step costs)")
    return PhaseLock(PhaseGrid(period, offset), cost)


class RealtimeGuardMixin:
    """Mixed in between the preemption mixin and vLLM's Scheduler; see the module docstring."""

    running: list[Any]
    waiting: Any
    vllm_config: Any
    scheduler_config: Any
    current_step: int
    max_num_active_reqs: int
    max_num_scheduled_tokens: int
    adaptive_long_prefill_threshold: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        extra = self.vllm_config.additional_config
        extra = extra if isinstance(extra, dict) else {}
        self.guard_chunk_tokens = int(extra.get(CHUNK_KEY, 0) or 0)
        self.guard_hold_s = float(extra.get(HOLD_KEY, DEFAULT_HOLD_S))
        self.guard_batch_priority = int(extra.get(BATCH_PRIORITY_KEY, DEFAULT_BATCH_PRIORITY))
        if self.guard_chunk_tokens < 0 or self.guard_hold_s < 0:
            raise ValueError(f"{CHUNK_KEY} and {HOLD_KEY} must be >= 0")
        # Start guarded: realtime may come at any time; a batch-only engine drops the cap
        # once no realtime was seen for one hold.
        self._guard_seen = time.monotonic()
        self._alone_run = 0  # realtime-alone steps in a row
        self.num_guard_realtime_steps = 0  # steps given to realtime alone
        self.num_guard_capped_steps = 0  # steps whose batch prefill was capped
        # The step phase lock works through the cap: only with the guard on.
        self.phase_lock = _phase_lock(extra) if self.guard_chunk_tokens > 0 else None
        self.num_guard_phase_steps = 0  # capped steps whose chunk the lock sized
        self._phase_step: tuple[int, int] | None = None  # this step's (decodes, context)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self.guard_chunk_tokens <= 0:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        wall = wall_clock()
        lock = self.phase_lock
        if lock is not None:
            lock.observe(wall, idle=not self.running)
        self._phase_step = None
        restore = self._guard_step(time.monotonic(), wall)
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            restore()
        if lock is not None and self._phase_step is not None:
            decodes, ctx = self._phase_step
            total = int(getattr(out, "total_num_scheduled_tokens", 0))
            lock.stepped(wall, decodes, ctx, max(0, total - decodes))
        return out

    # ---- one step ----------------------------------------------------------------------------

    def _guard_can_admit(self, req: Any) -> bool:
        """Would vLLM admit this waiting request this step? The preemptive scheduler answers
        from slots and free KV blocks; alone, the guard assumes yes."""
        return True

    def _is_batch(self, req: Any) -> bool:
        return int(req.priority) >= self.guard_batch_priority

    def _guard_step(self, now: float, wall: float) -> Any:
        """Apply this step's rule; returns the function that undoes it. ``now`` is monotonic
        (the hold), ``wall`` wall-clock time (the phase grid)."""
        # The waiting queue is a priority heap (the guard runs under the priority policy only):
        # when its head is batch, nothing behind it is realtime, and the scan is skipped.
        head = self.waiting.peek_request() if self.waiting else None
        waiting_rt = (
            [r for r in self.waiting if not self._is_batch(r)]
            if head is not None and not self._is_batch(head)
            else []
        )
        running_rt = [r for r in self.running if not self._is_batch(r)]
        if waiting_rt or running_rt:
            self._guard_seen = now
        # Only realtime that can start now earns a step alone: one that cannot fit must not
        # stop the batch whose finishing would make room for it.
        admissible = [r for r in waiting_rt if self._guard_can_admit(r)]
        wants_alone = admissible or any(_pending(r) > 1 for r in running_rt)
        if wants_alone and self._alone_run < MAX_ALONE_STEPS:
            self._alone_run += 1
            self.num_guard_realtime_steps += 1
            paused = [r for r in self.running if self._is_batch(r)]
            streaming = int(getattr(self, "num_waiting_for_streaming_input", 0))
            limit = len(self.running) + streaming + len(admissible)
            return self._set_for_step(paused, active=limit)
        # A step shared with batch after MAX_ALONE_STEPS in a row: batch's starvation bound.
        self._alone_run = 0
        if now - self._guard_seen > self.guard_hold_s:
            return lambda: None
        prefilling = [r for r in self.running if self._is_batch(r) and _pending(r) > 1]
        decoding = [r for r in self.running if _pending(r) <= 1]
        decodes = len(decoding)
        self.num_guard_capped_steps += 1
        chunk = self.guard_chunk_tokens
        if self.phase_lock is not None and (prefilling or self.waiting):
            ctx = sum(int(r.num_computed_tokens) for r in decoding)
            limit = phase_chunk_limit(self.guard_chunk_tokens)
            chunk = self.phase_lock.chunk(wall, decodes, ctx, limit)
            self._phase_step = (decodes, ctx)
            self.num_guard_phase_steps += 1
        if chunk == 0:
            # The step ends on the grid with its decodes alone: no batch prefill at all
            # (a threshold of 0 would mean none to vLLM, so the budget alone holds it).
            return self._set_for_step(
                prefilling, tokens=min(self.max_num_scheduled_tokens, decodes)
            )
        return self._set_for_step(
            prefilling[1:],  # one batch prefill continues; the chunk caps it
            tokens=min(self.max_num_scheduled_tokens, decodes + chunk),
            threshold=chunk,
        )

    def _set_for_step(
        self,
        paused: list[Any],
        *,
        active: int | None = None,
        tokens: int | None = None,
        threshold: int | None = None,
    ) -> Any:
        # vLLM increments current_step on entry and skips a request while current_step is
        # below its next_decode_eligible_step.
        skip_until = self.current_step + 2
        saved = [(r, r.next_decode_eligible_step) for r in paused]
        for r, _ in saved:
            r.next_decode_eligible_step = max(r.next_decode_eligible_step, skip_until)
        old = (
            self.max_num_active_reqs,
            self.max_num_scheduled_tokens,
            self.scheduler_config.long_prefill_token_threshold,
            self.adaptive_long_prefill_threshold,
        )
        if active is not None:
            self.max_num_active_reqs = min(self.max_num_active_reqs, active)
        if tokens is not None:
            self.max_num_scheduled_tokens = tokens
        if threshold is not None:
            self.scheduler_config.long_prefill_token_threshold = threshold
            self.adaptive_long_prefill_threshold = False

        def restore() -> None:
            for r, step in saved:
                r.next_decode_eligible_step = step
            (
                self.max_num_active_reqs,
                self.max_num_scheduled_tokens,
                self.scheduler_config.long_prefill_token_threshold,
                self.adaptive_long_prefill_threshold,
            ) = old

        return restore
