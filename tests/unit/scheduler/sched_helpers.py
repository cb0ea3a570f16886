"""Factories for plain policy objects (no services): jobs, workers, and a policy driver."""

from __future__ import annotations

from scheduler.cost_model import CostModel
from scheduler.interface import SchedulingPolicy
from scheduler.types import Assign, Decision, JobClass, JobView, Preempt, WorkerView

COST = CostModel(
    step_base_s=0.01,
    decode_per_seq_s=0.001,
    decode_per_ctx_token_s=1e-7,
    prefill_per_token_s=1e-4,
    max_slots=8,
    token_budget=1024,
    kv_capacity_tokens=100_000,
)


def rt(
    job_id: str,
    tenant: str = "a",
    *,
    at: float = 0.0,
    prompt: int = 100,
    out: int = 50,
    model: str = "m",
    priority: int = 1,
    weight: float = 1.0,
    slo: float | None = None,
    prefix: str | None = None,
) -> JobView:
    return JobView(
        job_id,
        tenant,
        JobClass.REALTIME,
        priority,
        model,
        at,
        None,
        prompt,
        out,
        tenant_weight=weight,
        ttft_slo_s=slo,
        prefix_key=prefix,
    )


def batch(
    job_id: str,
    tenant: str = "a",
    *,
    at: float = 0.0,
    prompt: int = 100,
    out: int = 50,
    model: str = "m",
    priority: int = 3,
    weight: float = 1.0,
    deadline: float | None = None,
    prefix: str | None = None,
) -> JobView:
    return JobView(
        job_id,
        tenant,
        JobClass.BATCH,
        priority,
        model,
        at,
        deadline,
        prompt,
        out,
        tenant_weight=weight,
        prefix_key=prefix,
    )


def worker(
    worker_id: str,
    *,
    slots: int = 4,
    kv: int = 100_000,
    models: tuple[str, ...] = ("m",),
    running: int = 0,
    kv_used: int = 0,
) -> WorkerView:
    return WorkerView(worker_id, models, slots, running, kv, kv_used, 0.0, cost=COST)


def assigns(decisions: list[Decision]) -> list[tuple[str, str]]:
    return [(d.job_id, d.worker_id) for d in decisions if isinstance(d, Assign)]


def preempts(decisions: list[Decision]) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, Preempt)]


def order(policy: SchedulingPolicy, now: float = 0.0) -> list[str]:
    return [job_id for job_id, _ in assigns(policy.schedule(now))]
