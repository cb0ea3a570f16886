"""Thin Celery tasks: take ids, hand them to the engine host. The logic is in worker.runner."""

from __future__ import annotations

from celery import Celery

from service.store.task_queue import RUN_JOB_TASK
from worker.host import EngineHost


def register_tasks(app: Celery, host: EngineHost) -> None:
    @app.task(name=RUN_JOB_TASK, ignore_result=True)
    def run_job(job_id: str, attempt: int) -> str:
        return host.run_job(job_id, attempt)
