"""The banner's line about the demo tenant's plan: what its latency targets mean on the engine
at hand. The built-in targets (a first token within 1 s on `standard`) are a GPU's; a small
model on a CPU meets them when idle and not under a burst. Under the default `queue` admission
the target is a goal that orders work and is reported as attainment, not a bar that refuses:
the line says so, so a new user's burst that waits seconds is not taken for a broken promise."""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import select

from service.cli.bootstrap import DEMO_TENANT
from service.store.db import sync_session
from service.store.models.plans import QUEUE, Plan
from service.store.models.tenants import Tenant


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def describe(plan: Plan, *, cpu_engine: bool) -> str:
    """One line (two on a CPU engine) for the banner."""
    head = f"  Plan          {plan.name} (tenant {DEMO_TENANT}): "
    if plan.admission_mode == QUEUE:
        line = (f"{head}first token in {_seconds(plan.ttft_slo_ms)} is a goal; requests "
                f"wait up to {_seconds(plan.max_queue_wait_ms)}, then 429")
    else:
        line = (f"{head}a request that would wait past {_seconds(plan.ttft_slo_ms)} for its "
                f"first token gets 429")
    if cpu_engine:
        line += ("\n                a burst on this CPU waits seconds; `fairway plan list` "
                 "shows every plan")
    return line


def no_gpu() -> bool:
    """No NVIDIA device here (vLLM then runs on the CPU), told without importing torch."""
    return shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists()


def demo_plan_line(database_url: str, *, engine_kind: str) -> str | None:
    with sync_session(database_url) as session:
        plan = session.scalars(select(Plan).join(Tenant, Tenant.plan == Plan.name)
                               .where(Tenant.name == DEMO_TENANT)).first()
        return None if plan is None else describe(
            plan, cpu_engine=engine_kind == "vllm" and no_gpu())
