"""The realtime guard on vLLM's scheduler: keep the engine step a realtime request waits for short.

Layer 1 (``vllm_preempt``) gets a realtime request *into* the running batch within one step.
What it still pays under a batch flood is the steps themselves: vLLM fills every step's token
budget with batch prefill chunks (hundreds of ms on a GPU at 8192 tokens) and runs every batch
decode beside the realtime prefill. The guard changes two things, per step:

1. **Realtime steps alone.** While a realtime request waits for admission or is still
   prefilling, the step carries realtime work only: running batch requests sit the step out
   (vLLM skips a running request whose ``next_decode_eligible_step`` is ahead, as it does for
   pipeline-parallel cadence) and no batch request is admitted (the active-request limit is
   held at what realtime needs). Batch loses one step of progress, not its KV; after
   ``MAX_ALONE_STEPS`` (8) such steps in a row the next is shared, so batch is never starved.
2. **Short batch prefill.** For ``hold_s`` after realtime was last seen (or after the engine
   started), batch prefill takes at
   most ``chunk_tokens`` per step in total: one running batch prefill continues (the others sit
   the step out), vLLM's ``long_prefill_token_threshold`` caps it at the chunk, and the step's
   token budget is cut to the decodes plus the chunk, so newly admitted batch shares the rest.

"Realtime" is any request whose priority beats ``batch_priority``: 2, Fairway's flex tier, the
best priority the policy still treats as batch class (preemptible, fair-shared as batch).
The simulator runs the same rules (``scheduler.sim.engine``, ``realtime_guard``); the chunk
default is the profile's ``CostModel.guard_chunk_tokens`` (480 on a GPU, 64 on CPU).

Everything changed for a step is put back when ``schedule()`` returns, so vLLM's own state
(configs, limits, per-request cadence) is never left altered.
"""

from __future__ import annotations

import time
from typing import Any

CHUNK_KEY = "fairway_guard_chunk_tokens"  # VllmConfig.additional_config; absent or 0: off
HOLD_KEY = "fairway_guard_hold_s"
BATCH_PRIORITY_KEY = "fairway_guard_batch_priority"
DEFAULT_HOLD_S = 60.0
DEFAULT_BATCH_PRIORITY = 2  # scheduler.policies.config.FLEX_TIER
# Batch sits out at most this many steps in a row: under a realtime flood it still moves
# every ninth step (realtime alone takes at most 8/9 of the steps from it).
MAX_ALONE_STEPS = 8
GPU_CHUNK_TOKENS = 480  # the H200 profile's CostModel.guard_chunk_tokens()
CPU_CHUNK_TOKENS = 64

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

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self.guard_chunk_tokens <= 0:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        restore = self._guard_step(time.monotonic())
        try:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            restore()

    # ---- one step ----------------------------------------------------------------------------

    def _guard_can_admit(self, req: Any) -> bool:
        """Would vLLM admit this waiting request this step? The preemptive scheduler answers
        from slots and free KV blocks; alone, the guard assumes yes."""
        return True

    def _is_batch(self, req: Any) -> bool:
        return int(req.priority) >= self.guard_batch_priority

    def _guard_step(self, now: float) -> Any:
        """Apply this step's rule; returns the function that undoes it."""
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
        decodes = sum(1 for r in self.running if _pending(r) <= 1)
        self.num_guard_capped_steps += 1
        return self._set_for_step(
            prefilling[1:],  # one batch prefill continues; the chunk caps it
            tokens=min(self.max_num_scheduled_tokens, decodes + self.guard_chunk_tokens),
            threshold=self.guard_chunk_tokens,
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
