"""Rules of Fairway's engine scheduler, defined once for both sides that run them: the
simulator's engine model (``scheduler.sim.engine_model``) and the engines the workers run
(the realtime guard ``worker.engine.vllm_guard``, the priority preemption
``worker.engine.vllm_preempt`` and its model in the test engine ``worker.engine.sim``). The
simulator's figures describe production only while both follow the same rules.
``scheduler.step_phase`` holds the other shared rule, the step phase lock's grid.
"""

from __future__ import annotations

# Realtime guard: batch sits out at most this many steps in a row, so under a realtime flood
# it still moves every ninth step (realtime alone takes at most 8/9 of the steps from it).
MAX_ALONE_STEPS = 8

# Realtime guard: batch prefill stays capped this long after realtime was last seen. An engine
# starts capped (it cannot know whether realtime is coming), so a batch-only engine runs
# capped for one hold.
GUARD_HOLD_S = 60.0

# Realtime guard: what a capped step's batch prefill may cost, in step bases (the fixed cost
# of one engine step). Three keep a guarded step short while its fixed cost stays about a
# quarter of the step (one base in four).
GUARD_CHUNK_STEP_BASES = 3.0
# Chunks are whole multiples of two KV blocks (vLLM's default block is 16 tokens). A power of
# two overshot the rule by 9% on the H200 profile (512 for 469), which its realtime p99 paid for.
GUARD_CHUNK_ROUNDING = 32
GUARD_CHUNK_MIN = 16

# Layer 1 preemption: a waiting request preempts running ones only if its priority beats theirs
# by at least this much (0 would let equal priorities preempt each other back and forth).
PREEMPT_PRIORITY_GAP = 1


def guard_chunk_tokens(step_base_s: float, prefill_per_token_s: float) -> int:
    """Batch prefill tokens per capped step for an engine with these step costs (480 on the
    H200 profile, 64 on the CPU one)."""
    tokens = GUARD_CHUNK_STEP_BASES * step_base_s / max(prefill_per_token_s, 1e-12)
    rounding = GUARD_CHUNK_ROUNDING
    return max(GUARD_CHUNK_MIN, rounding * round(tokens / rounding))


def phase_chunk_limit(chunk_tokens: int) -> int:
    """The most batch prefill a phase-locked step may take to reach its grid point: twice the
    guard's chunk. A step that cannot reach the point within it ends early and locks again on
    the next one."""
    return 2 * chunk_tokens
