"""Translate rows and heartbeats into the policy's plain objects."""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from scheduler.cost_profiles import PROFILES
from scheduler.types import JobClass, JobView, WorkerView
from service.store.heartbeats import adapter_load_times
from service.store.job_queries import QueuedJob


def job_view(job: QueuedJob) -> JobView:
    arrival = job.created_at.timestamp()
    deadline = job.deadline_at.timestamp() if job.deadline_at else None
    # A realtime job's TTFT target: its tenant's plan's, or sooner if its deadline is.
    ttft_slo = None
    if job.kind == JobClass.REALTIME:
        limits = [s for s in (job.ttft_target_s, deadline - arrival if deadline else None)
                  if s is not None]
        ttft_slo = min(limits) if limits else None
    return JobView(
        job_id=str(job.job_id),
        tenant_id=str(job.tenant_id),
        job_class=JobClass(job.kind),
        priority=job.priority,
        model=job.model,
        arrival=arrival,
        deadline=deadline,
        # A resumed job re-prefills its output so far along with the prompt.
        prompt_tokens=job.prompt_tokens_estimate + job.generated_tokens,
        max_tokens=job.max_tokens,
        tenant_weight=job.tenant_weight,
        prefix_key=job.prefix_key,
        prefix_tokens=job.prefix_tokens,
        ttft_slo_s=ttft_slo,
        max_wait_s=job.max_wait_s if job.kind == JobClass.REALTIME else None,
        generated_tokens=job.generated_tokens,
        requeued=job.attempt > 0,
        adapter=_adapter_of(job),
    )


def _adapter_of(job: QueuedJob) -> str | None:
    """The tenant's adapter the job asks for: its row keeps the base model, its request the
    adapter's ft: name, which workers' beats name their warm adapters by."""
    model = (job.request or {}).get("model")
    return model if isinstance(model, str) and model.startswith("ft:") else None


def worker_view(beat: dict[str, Any], assigned: dict[str, JobClass]) -> WorkerView:
    """A draining worker (stopping: worker.drain) has no slots, so nothing more is placed
    there, no express ticket names it and no victim is taken there for a newcomer; it stays
    alive to the policy, its jobs booked on it, until they park or end and it goes. Its KV
    capacity stays: a pool whose every worker drains (a one-worker restart) still knows what
    fits, and its jobs wait for the next worker instead of being refused as too large."""
    draining = bool(beat.get("draining", False))
    capacity = int(beat.get("kv_capacity_tokens", 0))
    adapters = beat.get("adapters")
    return WorkerView(
        worker_id=beat["worker_id"],
        models=tuple(beat.get("models", ())),
        max_slots=0 if draining else int(beat.get("max_slots", 1)),
        running=int(beat.get("running", 0)),
        kv_capacity_tokens=capacity,
        kv_used_tokens=int(float(beat.get("kv_usage", 0.0)) * capacity),
        last_seen=float(beat.get("ts", 0.0)),
        assigned=dict(assigned),
        cost=PROFILES.get(str(beat.get("cost_profile", ""))),
        running_ids=frozenset(_job_ids(beat.get("job_ids", ()))),
        # LoRA, when the worker reports it: the adapters its engine holds loaded (least
        # recently used first) and its slots; absent, the policy keeps its own ledger.
        adapters=tuple(str(a) for a in adapters) if isinstance(adapters, list) else (),
        max_loras=int(beat.get("max_loras", 0)),
        max_cpu_loras=int(beat.get("max_cpu_loras", 0)),
        adapter_load_s=_median_load_s(beat.get("adapter_load_times")),
    )


def _median_load_s(published: Any) -> float | None:
    """The median of every recent load a beat lists (``adapter_load_times``); None without
    any."""
    samples = [s for seconds, _ in adapter_load_times(published).values() for s in seconds]
    return statistics.median(samples) if samples else None


def _job_ids(raw: Any) -> list[str]:
    """The policy's job ids are canonical UUID strings; a malformed entry is skipped."""
    ids = []
    for value in raw if isinstance(raw, list) else ():
        try:
            ids.append(str(uuid.UUID(str(value))))
        except ValueError:
            continue
    return ids


def live_beats(beats: list[dict[str, Any]], *, silence_s: float) -> list[dict[str, Any]]:
    """The heartbeats of workers taken for alive: those within ``silence_s`` of the newest beat
    of any worker, not of the clock. A starved host (or a stalled dispatcher) delays every beat
    together, and declaring everyone dead then only re-runs work; and re-queuing early only
    helps while some worker lives to take the jobs. A pool that all went silent is left to the
    job leases."""
    if not beats:
        return []
    newest = max(float(b.get("ts", 0)) for b in beats)
    return [b for b in beats if float(b.get("ts", 0)) >= newest - silence_s]
