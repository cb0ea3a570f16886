"""What the engine host does with each hand-off entry it reads: a job task on its loop, the
trace context passed along; a duplicate of the attempt running here dropped at once, a newer
attempt of the same job started; an unreadable entry skipped."""

from __future__ import annotations

import asyncio
from typing import Any

from service.store.handoff import Handoff, JobBody
from service.store.settings import EngineSettings, Settings
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.host import EngineHost

JOB = "0b6f1f3e-5d0c-4f5e-9a43-3c2d1e0f9a11"
OTHER = "5c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


class Runner:
    def __init__(self) -> None:
        self.active: dict[str, str] = {}
        self.runs: list[tuple[str, int, Any]] = []
        self.bodies: list[JobBody | None] = []
        self.ahead: list[bool] = []

    async def run(self, job_id: str, attempt: int, trace: dict[str, str] | None = None,
                  body: JobBody | None = None, ahead: bool = False) -> str:
        self.runs.append((job_id, attempt, trace))
        self.bodies.append(body)
        self.ahead.append(ahead)
        return "succeeded"


def _taken(*messages: Handoff | None, active: dict[str, str] | None = None,
           bodies: list[JobBody | None] | None = None,
           ahead: list[bool] | None = None) -> list[tuple[str, int, Any]]:
    host = EngineHost(SimEngine(SimEngineConfig()),
                      Settings(engine=EngineSettings(kind="sim")), "w1")
    runner = Runner()
    runner.active = dict(active or {})
    host.runner = runner  # type: ignore[assignment]

    async def take() -> None:
        for message in messages:
            host._take(message)
        await asyncio.gather(*host._jobs)

    asyncio.run(take())
    host.loop.close()  # the host's own loop, never started here
    assert not host._jobs  # finished tasks are let go
    if bodies is not None:
        bodies.extend(runner.bodies)
    if ahead is not None:
        ahead.extend(runner.ahead)
    return runner.runs


def test_an_entry_sent_alongside_its_insert_reaches_the_runner_marked() -> None:
    marks: list[bool] = []
    assert len(_taken(Handoff(JOB, 1, ahead=True), Handoff(OTHER, 1), ahead=marks)) == 2
    assert marks == [True, False]  # the express path's entry waits for its row; others not


def test_each_entry_runs_as_a_task_with_its_trace() -> None:
    trace = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    assert _taken(Handoff(JOB, 1, trace), None) == [(JOB, 1, trace)]


def test_the_attempt_running_here_is_not_started_again_but_a_newer_one_is() -> None:
    running = {JOB: f"{JOB}:1"}
    assert _taken(Handoff(JOB, 1), active=running) == []
    assert _taken(Handoff(JOB, 2), active=running) == [(JOB, 2, None)]


def test_a_carried_body_reaches_the_runner() -> None:
    body = JobBody("chat.completions", {"messages": []}, 8, 0, "t")
    bodies: list[JobBody | None] = []
    assert _taken(Handoff(JOB, 1, None, body), Handoff(OTHER, 1), bodies=bodies) == [
        (JOB, 1, None), (OTHER, 1, None)]
    assert bodies == [body, None]
