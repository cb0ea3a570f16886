"""What a worker's heartbeat says about it: the payload the dispatcher places by
(scheduler.dispatcher.views) and the API's catalog reads (service.web.catalog)."""

from __future__ import annotations

import time
from typing import Any

from service.store.heartbeats import STRUCTURED_OUTPUTS
from service.store.keys import worker_queue
from service.store.settings import EngineSettings, WorkerSettings
from worker.engine.base import Engine, EngineStats, supports_structured_outputs
from worker.engine.lora import LoraConfig


def default_cost_profile(engine: EngineSettings) -> str:
    """The scheduler's cost model for this worker (scheduler.cost_profiles names)."""
    if engine.kind == "sim":
        return "cpu-smollm2-135m"
    import torch

    return "h200-llama3-8b" if torch.cuda.is_available() else "cpu-smollm2-135m"


def key_ttl_s(worker: WorkerSettings) -> int:
    """TTL of the keys a worker keeps alive with its heartbeats (its beat, step clock, phase
    slot). Generous: a loaded host that misses a beat or two must not look dead."""
    return max(5, int(worker.heartbeat_seconds * 5))


def engine_capabilities(engine: Engine) -> list[str]:
    """The optional features an engine has, as its heartbeat lists them."""
    return [STRUCTURED_OUTPUTS] if supports_structured_outputs(engine) else []


def beat_payload(engine: Engine, stats: EngineStats, settings: EngineSettings, *,
                 worker_id: str, active: list[str], metrics_port: int | None,
                 incarnation: str, draining: bool, adapters: list[str] | None = None,
                 lora: LoraConfig | None = None,
                 load_times: dict[str, dict[str, object]] | None = None) -> dict[str, Any]:
    """One beat: the engine's room and load, the jobs it runs, and who this process is; with
    LoRA on, the adapters it holds warm (their ft: names) and its adapter slots, which the
    policy places adapter jobs by (scheduler.policies.adapters), and the recent load times
    per adapter id (worker.engine.lora.AdapterLoads.load_times), which the admin's adapter
    view reads (service.admin.adapter_view)."""
    beat = {
        "worker_id": worker_id,
        "queue": worker_queue(worker_id),
        "models": [engine.model_name],
        "max_slots": stats.max_num_seqs,
        "running": stats.num_running + stats.num_waiting,
        "waiting": stats.num_waiting,
        "active_jobs": len(active),
        # Lets the dispatcher free a finished job's slot before the next beat.
        "job_ids": active,
        "cost_profile": settings.cost_profile or default_cost_profile(settings),
        "kv_usage": stats.kv_usage,
        "kv_capacity_tokens": stats.kv_capacity_tokens,
        "metrics_port": metrics_port,
        "ts": time.time(),
        # This process's start: a worker restarted under the same id is a new incarnation,
        # and the dispatcher re-queues what the old one held.
        "incarnation": incarnation,
        # What the engine can do beyond plain text; the API refuses what no worker serving
        # the model can (service.web.catalog).
        "capabilities": engine_capabilities(engine),
        # Stopping: the dispatcher places nothing more here (scheduler.dispatcher.views).
        "draining": draining,
    }
    if lora is not None:
        beat.update(adapters=adapters or [], max_loras=lora.max_loras,
                    max_cpu_loras=lora.max_cpu_loras, adapter_load_times=load_times or {})
    return beat
