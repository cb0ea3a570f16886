"""Layer 1 of "realtime preempts batch": a vLLM scheduler where a waiting request can preempt.

vLLM V1's scheduler never lets a *waiting* request preempt *running* ones (vllm-project/vllm#40004):
under ``scheduling_policy="priority"`` a realtime request (priority 0/1) that arrives while batch
requests (priority 3) fill every slot or the KV cache waits until one of them finishes. The
subclasses here run one extra pass before each ``schedule()`` step:

1. Walk the waiting queue in priority order. A request is a *candidate* while its priority beats
   the worst running request's by at least ``priority_gap`` (default 1).
2. For each candidate, check whether vLLM's own admission would take it this step: a free
   running slot, and enough free KV blocks for its whole uncached context plus one decode token
   (vLLM checks the full sequence at admission), after the running requests' own growth this
   step. If not, plan victims with vLLM's own victim key, ``max(running, key=(priority,
   arrival_time))``, only among requests at least ``priority_gap`` worse than the candidate,
   until it fits. If it cannot fit even then, preempt nothing for it and stop (vLLM's
   admission stops at the first request that does not fit, too).
3. Preempt the planned victims with vLLM's ``_preempt_request`` (recompute: KV freed, generated
   tokens kept, back to the waiting queue; greedy output is unchanged), then run the stock
   ``schedule()``, which admits the candidates in the same step.

Planning before acting means a request that could never fit does not cost anybody their KV.
The block estimate is conservative except when a candidate shares cached prefix blocks with
a victim; then it may fall one step short, and the next step's pass finishes the job.

Pinned-version guard: this relies on private parts of vLLM's scheduler. At import we check
they exist with the shapes we use and raise ``ImportError`` naming what moved; each instance
re-checks the attributes that only exist after ``__init__``. vLLM 0.32.x is what we ship and
test; another version that passes the checks runs with a warning.

The engine core runs in a spawned process and resolves the class by name, so `VllmEngine`
passes ``SYNC_QUALNAME`` or ``ASYNC_QUALNAME`` (see `install`).
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

import vllm
from vllm.utils.math_utils import cdiv
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from scheduler.engine_rules import PREEMPT_PRIORITY_GAP
from scheduler.step_phase import PhaseGrid
from worker.engine import vllm_guard
from worker.engine.vllm_guard import RealtimeGuardMixin

log = logging.getLogger(__name__)

SUPPORTED_VLLM_SERIES = "0.32."
# Where the gap travels to the engine core process: VllmConfig.additional_config is pickled
# with the config, unlike a class attribute set in the parent.
GAP_KEY = "fairway_preempt_priority_gap"
DEFAULT_GAP = PREEMPT_PRIORITY_GAP
SYNC_QUALNAME = "worker.engine.vllm_preempt.PreemptiveScheduler"
ASYNC_QUALNAME = "worker.engine.vllm_preempt.PreemptiveAsyncScheduler"

# Private methods we call, with the leading parameters we pass.
_SCHEDULER_METHODS: dict[str, tuple[str, ...]] = {
    "schedule": (),
    "_preempt_request": ("request", "timestamp", "drop_stale_output"),
    "_request_blocks_can_be_freed": ("request",),
}
# Set in Scheduler.__init__, so checkable only on an instance.
_INSTANCE_ATTRS = (
    "running",
    "waiting",
    "policy",
    "vllm_config",
    "kv_cache_config",
    "kv_cache_manager",
    "max_num_running_reqs",
    "max_num_scheduled_tokens",
    "max_model_len",
    "num_lookahead_tokens",
    "requires_kv_delivery",
)
_KV_MANAGER_METHODS = ("get_computed_blocks", "get_blocks")


# ---- pinned-version guard ------------------------------------------------------------------


def interface_problems() -> list[str]:
    """What of vLLM's private scheduler interface we rely on is missing or changed shape."""
    problems: list[str] = []
    for name, params in _SCHEDULER_METHODS.items():
        fn = getattr(Scheduler, name, None)
        if not callable(fn):
            problems.append(f"Scheduler.{name} is missing")
            continue
        got = tuple(inspect.signature(fn).parameters)[1 : 1 + len(params)]
        if got != params:
            problems.append(f"Scheduler.{name} takes {got}, expected {params}")
    if not callable(getattr(RequestQueue, "peek_request", None)):
        problems.append("RequestQueue.peek_request is missing")
    for prop in ("num_tokens", "num_tokens_with_spec"):
        if not isinstance(getattr(Request, prop, None), property):
            problems.append(f"Request.{prop} is no longer a property")
    probe = Request.__init__.__code__.co_names + Request.__init__.__code__.co_varnames
    for attr in vllm_guard.REQUEST_ATTRS:
        if attr not in probe and not hasattr(Request, attr):
            problems.append(f"Request.{attr} is missing")
    for status in ("WAITING", "PREEMPTED", "RUNNING"):
        if not hasattr(RequestStatus, status):
            problems.append(f"RequestStatus.{status} is missing")
    if not hasattr(SchedulingPolicy, "PRIORITY"):
        problems.append("SchedulingPolicy.PRIORITY is missing")
    if not issubclass(AsyncScheduler, Scheduler):
        problems.append("AsyncScheduler no longer derives from Scheduler")
    return problems


def instance_problems(sched: Any) -> list[str]:
    """The per-instance half of the guard: attributes vLLM sets in Scheduler.__init__."""
    attrs = _INSTANCE_ATTRS + vllm_guard.INSTANCE_ATTRS
    problems = [f"Scheduler().{a} is missing" for a in attrs if not hasattr(sched, a)]
    config = getattr(sched, "scheduler_config", None)
    if config is not None and not hasattr(config, "long_prefill_token_threshold"):
        problems.append("SchedulerConfig.long_prefill_token_threshold is missing")
    kvm = getattr(sched, "kv_cache_manager", None)
    if kvm is not None:
        problems += [
            f"KVCacheManager.{m} is missing"
            for m in _KV_MANAGER_METHODS
            if not callable(getattr(kvm, m, None))
        ]
        if not callable(getattr(getattr(kvm, "block_pool", None), "get_num_free_blocks", None)):
            problems.append("KVCacheManager.block_pool.get_num_free_blocks is missing")
    return problems


def _fail(problems: list[str]) -> str:
    return (
        f"worker.engine.vllm_preempt was written against vLLM {SUPPORTED_VLLM_SERIES}x, and "
        f"vLLM {vllm.__version__}'s scheduler internals moved: " + "; ".join(problems) + ". "
        "Install the pinned vLLM, or port PreemptiveScheduler (see docs/preemption.md), or "
        "turn layer 1 off with VllmEngineConfig(preempt_for_priority=False)."
    )


_problems = interface_problems()
if _problems:
    raise ImportError(_fail(_problems))
if not str(vllm.__version__).startswith(SUPPORTED_VLLM_SERIES):
    log.warning(
        "vLLM %s is not the pinned %sx; the preemptive scheduler's interface checks pass, "
        "but it is untested there",
        vllm.__version__,
        SUPPORTED_VLLM_SERIES,
    )


# ---- the scheduler ---------------------------------------------------------------------------


class _PriorityPreemptMixin:
    """Mixed in ahead of vLLM's Scheduler or AsyncScheduler; see the module docstring."""

    # Set by vLLM's Scheduler.__init__ (checked by instance_problems); declared for readers.
    running: list[Any]
    waiting: Any
    policy: Any
    vllm_config: Any
    kv_cache_config: Any
    kv_cache_manager: Any
    max_num_running_reqs: int
    max_num_scheduled_tokens: int
    max_model_len: int
    num_lookahead_tokens: int
    requires_kv_delivery: bool
    _preempt_request: Any
    _request_blocks_can_be_freed: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        problems = instance_problems(self)
        if problems:
            raise RuntimeError(_fail(problems))
        extra = self.vllm_config.additional_config
        gap = extra.get(GAP_KEY, DEFAULT_GAP) if isinstance(extra, dict) else DEFAULT_GAP
        if int(gap) < 1:
            # A gap of 0 would let equal priorities preempt each other back and forth.
            raise ValueError(f"{GAP_KEY} must be >= 1, got {gap}")
        self.priority_gap = int(gap)
        self.num_priority_preemptions = 0  # victims this layer preempted (engine-core side)
        self._block_sizes = [
            int(g.kv_cache_spec.block_size) for g in self.kv_cache_config.kv_cache_groups
        ]

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self.policy == SchedulingPolicy.PRIORITY:
            self.preempt_for_waiting()
        return super().schedule(*args, **kwargs)  # type: ignore[misc]

    # ---- the pass ----------------------------------------------------------------------------

    def preempt_for_waiting(self) -> list[Any]:
        """Preempt the running requests that waiting, better ones need this step; return them."""
        if not self.running or not self.waiting or not self._admitting():
            return []
        # Cheap test first: most steps have no waiting request that beats the worst running
        # one (batch behind batch), and walking the waiting heap copies it.
        worst = max(self.running, key=lambda r: (r.priority, r.arrival_time))
        if worst.priority - self.waiting.peek_request().priority < self.priority_gap:
            return []
        victims = self._plan_victims()
        now = time.monotonic()
        for victim in victims:
            self.running.remove(victim)
            # Recompute preemption, as vLLM does for KV pressure: the output so far stays in
            # the request, which goes back to the waiting queue behind the candidates.
            self._preempt_request(victim, now, drop_stale_output=self.requires_kv_delivery)
        if victims:
            self.num_priority_preemptions += len(victims)
            log.debug(
                "preempted %s for waiting higher-priority requests",
                [(v.request_id, v.priority) for v in victims],
            )
        return victims

    def _admitting(self) -> bool:
        # Paused engines admit nothing, and requests holding KV blocks (async KV loads) are
        # admitted before the waiting queue, so the estimate below would not hold.
        pause = getattr(self, "pause_state", None)
        if pause is not None and getattr(pause, "name", "UNPAUSED") != "UNPAUSED":
            return False
        return not getattr(self, "kv_holding_waiting", None)

    def _plan_victims(self) -> list[Any]:
        max_active = getattr(self, "max_num_active_reqs", None) or self.max_num_running_reqs
        in_slots = len(self.running) + int(getattr(self, "num_waiting_for_streaming_input", 0))
        free_slots = max_active - in_slots
        growth = {r.request_id: self._step_demand(r) for r in self.running}
        free_blocks = (
            self.kv_cache_manager.block_pool.get_num_free_blocks()
            - sum(b for _, b in growth.values())
            - int(getattr(self.kv_cache_manager, "watermark_blocks", 0))
        )
        budget = self.max_num_scheduled_tokens - sum(t for t, _ in growth.values())
        # vLLM's victim order: worst (priority, arrival_time) first.
        order = sorted(self.running, key=lambda r: (r.priority, r.arrival_time), reverse=True)
        planned: list[Any] = []
        for head in self.waiting:  # priority order
            if budget <= 0 or not order or not self._ready(head):
                break
            if order[0].priority - head.priority < self.priority_gap:
                break  # nobody running is worse enough than this one (nor than later ones)
            need = self._admission_blocks(head)
            extra: list[Any] = []
            slots, blocks, tokens = free_slots, free_blocks, budget
            while (slots < 1 or blocks < need) and len(extra) < len(order):
                victim = order[len(extra)]
                if victim.priority - head.priority < self.priority_gap:
                    break
                if not self._request_blocks_can_be_freed(victim):
                    break  # its blocks come back only after an in-flight step: no help now
                vt, vb = growth[victim.request_id]
                slots, blocks, tokens = slots + 1, blocks + vb + self._freed(victim), tokens + vt
                extra.append(victim)
            if slots < 1 or blocks < need:
                break  # cannot fit even with every allowed victim: preempt nobody for it
            planned += extra
            del order[: len(extra)]
            new_tokens = head.num_tokens - self._cached_tokens(head)
            free_slots, free_blocks, budget = slots - 1, blocks - need, tokens - new_tokens
        return planned

    def _guard_can_admit(self, req: Any) -> bool:
        """For the realtime guard (runs after this step's preemptions): a free slot and the
        free KV blocks vLLM's admission will ask for."""
        if not self._ready(req):
            return False
        max_active = getattr(self, "max_num_active_reqs", None) or self.max_num_running_reqs
        in_slots = len(self.running) + int(getattr(self, "num_waiting_for_streaming_input", 0))
        if in_slots >= max_active:
            return False
        free_blocks = self.kv_cache_manager.block_pool.get_num_free_blocks() - int(
            getattr(self.kv_cache_manager, "watermark_blocks", 0)
        )
        return bool(self._admission_blocks(req) <= free_blocks)

    # ---- estimates ---------------------------------------------------------------------------

    @staticmethod
    def _ready(req: Any) -> bool:
        """Would vLLM's admission loop consider it now (not blocked, no stale output)?"""
        if req.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            return False
        return not (req.num_stale_output_tokens and not req.drop_stale_output)

    def _step_demand(self, req: Any) -> tuple[int, int]:
        """(tokens, new blocks) a running request takes in this step, at most."""
        tokens = req.num_tokens_with_spec + req.num_output_placeholders - req.num_computed_tokens
        tokens = max(0, min(tokens, self.max_num_scheduled_tokens))
        if tokens == 0:
            return 0, 0
        end = min(req.num_computed_tokens + tokens + self.num_lookahead_tokens, self.max_model_len)
        held = self.kv_cache_manager.get_blocks(req.request_id).blocks
        blocks = sum(max(0, cdiv(end, bs) - len(held[i])) for i, bs in enumerate(self._block_sizes))
        return tokens, blocks

    def _freed(self, req: Any) -> int:
        """Blocks that return to the free pool when this request lets go of its own."""
        held = self.kv_cache_manager.get_blocks(req.request_id).blocks
        return sum(1 for group in held for b in group if b.ref_cnt == 1 and not b.is_null)

    def _hits(self, req: Any) -> tuple[Any, ...]:
        return tuple(self.kv_cache_manager.get_computed_blocks(req)[0].blocks)

    def _cached_tokens(self, req: Any) -> int:
        hits = self._hits(req)
        return min((len(g) * bs for g, bs in zip(hits, self._block_sizes, strict=True)), default=0)

    def _admission_blocks(self, req: Any) -> int:
        """Free blocks vLLM needs to admit it: the full context plus one decode token.

        Prefix-cache hits held by a running request cost nothing; hits on evictable (free)
        blocks still take a free block each, so they are not subtracted.
        """
        end = min(req.num_tokens + self.num_lookahead_tokens + 1, self.max_model_len)
        hits = self._hits(req)
        need = 0
        for i, bs in enumerate(self._block_sizes):
            shared = sum(1 for b in hits[i] if b.ref_cnt > 0 and not b.is_null) if hits else 0
            need += cdiv(end, bs) - shared
        return need


class PreemptiveScheduler(_PriorityPreemptMixin, RealtimeGuardMixin, Scheduler):
    """For engines without async scheduling (vLLM's CPU platform turns it off).

    The preemption pass runs first (it makes room for realtime), then the realtime guard
    (``vllm_guard``) shapes the step, then vLLM's own ``schedule()``.
    """


class PreemptiveAsyncScheduler(_PriorityPreemptMixin, RealtimeGuardMixin, AsyncScheduler):
    """For engines with async scheduling (vLLM's default on GPUs).

    `_preempt_request` already handles in-flight output (it marks it stale), as it must for
    vLLM's own KV-pressure preemptions inside schedule().
    """


def scheduler_qualname(async_scheduling: bool) -> str:
    return ASYNC_QUALNAME if async_scheduling else SYNC_QUALNAME


def install(
    vllm_config: Any,
    priority_gap: int = DEFAULT_GAP,
    guard_chunk_tokens: int = 0,
    guard_hold_s: float = vllm_guard.DEFAULT_HOLD_S,
    phase_period_s: float = 0.0,
    phase_offset_s: float = 0.0,
    phase_cost: dict[str, float] | None = None,
) -> str:
    """Plug the matching class into a resolved VllmConfig; returns the qualname used.

    ``guard_chunk_tokens`` > 0 turns the realtime guard on (``vllm_guard``); with it,
    ``phase_period_s`` > 0 turns the step phase lock on, with the grid offset and the step
    costs (``vllm_guard.PHASE_COST_FIELDS``) it predicts steps with. Call it after the config
    is created: the platform hook decides async scheduling there (vLLM does the same for its
    diffusion schedulers).
    """
    if guard_chunk_tokens < 0 or guard_hold_s < 0 or phase_period_s < 0:
        raise ValueError("guard_chunk_tokens, guard_hold_s and phase_period_s must be >= 0")
    if phase_period_s and guard_chunk_tokens:
        if phase_cost is None:
            raise ValueError("phase_period_s needs phase_cost (the profile's step costs)")
        vllm_guard.PhaseLock(PhaseGrid(phase_period_s), phase_cost)  # checks the costs
    if priority_gap < 1:
        raise ValueError(f"priority_gap must be >= 1, got {priority_gap}")
    sched = vllm_config.scheduler_config
    if sched.policy != "priority":
        raise ValueError("the preemptive scheduler needs scheduling_policy='priority'")
    qualname = scheduler_qualname(bool(sched.async_scheduling))
    sched.scheduler_cls = qualname
    if not isinstance(vllm_config.additional_config, dict):
        raise ValueError("VllmConfig.additional_config must be a dict to carry the gap")
    vllm_config.additional_config[GAP_KEY] = int(priority_gap)
    if guard_chunk_tokens:
        vllm_config.additional_config[vllm_guard.CHUNK_KEY] = int(guard_chunk_tokens)
        vllm_config.additional_config[vllm_guard.HOLD_KEY] = float(guard_hold_s)
        if phase_period_s and phase_cost is not None:
            extra = vllm_config.additional_config
            extra[vllm_guard.PHASE_PERIOD_KEY] = float(phase_period_s)
            extra[vllm_guard.PHASE_OFFSET_KEY] = float(phase_offset_s)
            extra[vllm_guard.PHASE_COST_KEY] = {
                f: float(phase_cost[f]) for f in vllm_guard.PHASE_COST_FIELDS
            }
    return qualname
