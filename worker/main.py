"""`fairway worker`: build the engine, start its host, then serve this worker's Celery queue."""

from __future__ import annotations

import logging
import os
import socket

from service.jobs.events import worker_queue
from service.settings import Settings
from worker.celery_app import make_celery
from worker.engine import build_engine
from worker.host import EngineHost
from worker.tasks import register_tasks

log = logging.getLogger("fairway.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def engine_from_settings(settings: Settings):  # type: ignore[no-untyped-def]
    if settings.engine == "sim":
        return build_engine("sim", model_name=settings.served_model_name,
                            max_num_seqs=settings.max_num_seqs,
                            max_model_len=settings.max_model_len, speed=settings.sim_speed)
    from worker.model_prep import ensure_default_model

    model_path = settings.model_path or str(ensure_default_model())
    return build_engine("vllm", model_path=model_path, model_name=settings.served_model_name,
                        kv_cache_gib=settings.kv_cache_gib, max_num_seqs=settings.max_num_seqs,
                        max_model_len=settings.max_model_len,
                        kv_offload_gib=(settings.kv_offload_gib
                                        if settings.preemption_mode == "swap" else None),
                        guard_chunk_tokens=settings.guard_chunk_tokens,
                        guard_hold_s=settings.guard_hold_s)


def run_worker(settings: Settings) -> None:
    worker_id = settings.worker_id or default_worker_id()
    host = EngineHost(engine_from_settings(settings), settings, worker_id)
    host.start()
    app = make_celery(settings)
    register_tasks(app, host)
    try:
        app.worker_main([
            "worker", "--pool=threads",
            f"--concurrency={settings.max_num_seqs + settings.realtime_headroom_slots}",
            "-Q", worker_queue(worker_id), "-n", f"{worker_id}@%h",
            "--without-mingle", "--without-gossip", f"--loglevel={settings.log_level}",
        ])
    finally:
        host.stop()
