"""`fairway worker`: build the engine, start its host, then serve this worker's Celery queue."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket

from celery.signals import worker_ready, worker_shutting_down
from redis import Redis

from scheduler.cost_profiles import profile
from scheduler.step_phase import PhaseGrid
from service.store import tracing
from service.store.keys import worker_queue
from service.store.settings import EngineSettings, Settings
from service.store.task_queue import make_celery
from service.store.telemetry.gc_pauses import freeze_startup_heap
from worker.adapters import lora_config
from worker.beat import default_cost_profile, key_ttl_s
from worker.broker import CONSUMER
from worker.engine import Engine, SimEngineConfig, VllmEngineConfig, build_engine
from worker.engine.vllm_guard import PHASE_COST_FIELDS
from worker.host import EngineHost
from worker.phase_slot import claim_phase_slot
from worker.tasks import register_tasks

log = logging.getLogger("fairway.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def phase_lock_plan(engine: EngineSettings) -> tuple[float, dict[str, float]]:
    """The step phase lock's period for this worker and the step costs its engine predicts
    with, both from the worker's cost profile (``engine.phase_period_s`` overrides the
    period). Period 0: no lock (the sim engine, the guard off, or a profile without one)."""
    if engine.kind != "vllm" or engine.guard_chunk_tokens == 0:
        return 0.0, {}
    cost = profile(engine.cost_profile or default_cost_profile(engine))
    period = cost.phase_period_s() if engine.phase_period_s is None else engine.phase_period_s
    return period, {f: float(getattr(cost, f)) for f in PHASE_COST_FIELDS}


def claim_phase_slot_for(settings: Settings, worker_id: str) -> int | None:
    """This worker's step phase slot, or None where it runs unlocked (no lock planned, Redis
    unreachable, every slot taken)."""
    if phase_lock_plan(settings.engine)[0] <= 0 or not settings.redis_url:
        return None
    redis = Redis.from_url(settings.redis_url, socket_connect_timeout=5)
    try:
        return claim_phase_slot(redis, settings.engine.served_model_name, worker_id,
                                key_ttl_s(settings.worker))
    finally:
        redis.close()


def engine_config(engine: EngineSettings,
                  phase_slot: int | None = None) -> VllmEngineConfig | SimEngineConfig:
    """The engine's config from the engine settings, the one place they meet; ``phase_slot``
    (claim_phase_slot_for) sets its phase grid offset, None runs it without the phase lock.
    An empty ``model_path`` converts the default model on first use."""
    if engine.kind == "sim":
        return SimEngineConfig(model_name=engine.served_model_name,
                               max_num_seqs=engine.max_num_seqs,
                               max_model_len=engine.max_model_len, speed=engine.sim_speed)
    from worker.model_prep import ensure_default_model

    model_path = engine.model_path or str(ensure_default_model())
    period, cost = phase_lock_plan(engine)
    offset = 0.0
    if period > 0 and phase_slot is not None:
        offset = PhaseGrid.for_slot(period, phase_slot).offset_s
    else:
        period = 0.0
    return VllmEngineConfig(
        model_path=model_path, model_name=engine.served_model_name,
        kv_cache_gib=engine.kv_cache_gib, max_num_seqs=engine.max_num_seqs,
        tensor_parallel_size=engine.tensor_parallel_size,
        max_model_len=engine.max_model_len, enforce_eager=engine.enforce_eager,
        kv_offload_gib=engine.kv_offload_gib if engine.preemption_mode == "swap" else None,
        guard_chunk_tokens=engine.guard_chunk_tokens, guard_hold_s=engine.guard_hold_s,
        phase_period_s=period, phase_offset_s=offset, phase_cost=cost if period > 0 else None)


def engine_from_settings(settings: Settings, phase_slot: int | None = None) -> Engine:
    """The worker's engine, not started (see `engine_config`), serving tenants' LoRA
    adapters when the adapter settings enable it."""
    config = engine_config(settings.engine, phase_slot)
    if settings.adapters.lora_enabled:
        config = dataclasses.replace(config, lora=lora_config(settings.adapters))
    return build_engine(config)


def run_worker(settings: Settings) -> None:
    worker_id = settings.worker.id or default_worker_id()
    slot = claim_phase_slot_for(settings, worker_id)
    if slot is not None:
        log.info("step phase slot %d for %s", slot, settings.engine.served_model_name)
    host = EngineHost(engine_from_settings(settings, slot), settings, worker_id, phase_slot=slot)
    host.start()
    if tracing.configure(settings.tracing, "fairway-worker"):
        tracing.instrument_celery()  # a task's span continues the dispatcher's send hop
    app = make_celery(settings)
    app.conf.worker_consumer = CONSUMER  # reconnects to Redis within 2 s of its return
    register_tasks(app, host)
    # Once Celery has booted too: a full collection then walks only what came after.
    worker_ready.connect(lambda **_: freeze_startup_heap("worker"), weak=False)
    # SIGTERM: Celery stops taking tasks and waits for those running; the host drains them
    # (batch parks at once, realtime gets its grace), so that wait is short (worker.drain).
    worker_shutting_down.connect(lambda **_: host.begin_drain(), weak=False)
    concurrency = settings.engine.max_num_seqs + settings.worker.realtime_headroom_slots
    try:
        app.worker_main([
            "worker", "--pool=threads",
            f"--concurrency={concurrency}",
            "-Q", worker_queue(worker_id), "-n", f"{worker_id}@%h",
            "--without-mingle", "--without-gossip", f"--loglevel={settings.logging.level}",
        ])
    finally:
        host.stop()
