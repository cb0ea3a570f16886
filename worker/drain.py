"""A worker's graceful drain (SIGTERM): it says so in its heartbeat, so the dispatcher stops
placing work on it at once; batch jobs park with their checkpoints (the preemption path) and
resume elsewhere from their tokens; realtime streams get a grace period to finish, and those
still running after it park too, to resume on another worker (the client's relay splices the
resumed attempt on, as after any preemption). Everything here runs on the engine host's loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from worker.runner import JobRunner

log = logging.getLogger("fairway.worker")

# Between the draining beat and the first park: the dispatcher reads heartbeats every half
# second, and a job parked before it has seen the beat could be placed right back here.
DRAIN_NOTICE_S = 1.0
SWEEP_S = 0.25  # how often batch jobs that started meanwhile are looked for and parked
PARK_PATIENCE_S = 30.0  # how long parks (Postgres writes) may take before the drain gives up


class Drain:
    def __init__(self, *, runner: JobRunner, realtime: Callable[[], Collection[asyncio.Task[str]]],
                 batch_ids: Collection[str], announce: Callable[[], Awaitable[None]],
                 stop_reading: Callable[[], None], grace_s: float,
                 notice_s: float = DRAIN_NOTICE_S) -> None:
        self.runner = runner
        self.realtime = realtime  # the realtime jobs' tasks (from the hand-off), live
        self.batch_ids = batch_ids  # the batch jobs' ids (from Celery), live
        self.announce = announce  # one heartbeat now (it carries ``draining``)
        self.stop_reading = stop_reading  # the hand-off reader stops
        self.grace_s = grace_s
        self.notice_s = notice_s
        self.started_at: float | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def begin(self) -> asyncio.Task[None]:
        """Start draining (once); the task ends when no job is left running here."""
        if self.task is None:
            self.started_at = time.monotonic()
            self.task = asyncio.create_task(self._run())
        return self.task

    async def _run(self) -> None:
        assert self.started_at is not None
        log.info("draining: no new work; batch jobs park, realtime streams get %.0f s",
                 self.grace_s)
        try:
            await self.announce()
        except Exception:  # the next regular beat says it
            log.exception("draining beat failed")
        await asyncio.sleep(min(self.notice_s, self.grace_s))
        sweeper = asyncio.create_task(self._park_batch_forever())
        try:
            deadline = self.started_at + self.grace_s
            while self.realtime() and time.monotonic() < deadline:
                await asyncio.wait(list(self.realtime()),
                                   timeout=min(0.5, deadline - time.monotonic()))
            # Past the grace: nothing more is read, and what still runs parks to resume
            # elsewhere (an entry placed here from now on is re-queued when this worker goes).
            self.stop_reading()
            left = [j for j in list(self.runner.active) if j not in self.batch_ids]
            for job_id in left:
                await self.runner.preempt(job_id)
            if left:
                log.info("drain grace over: %d realtime job(s) parked to resume elsewhere",
                         len(left))
            patience = time.monotonic() + PARK_PATIENCE_S
            while self.runner.active and time.monotonic() < patience:
                await asyncio.sleep(0.05)
            log.info("drained in %.1f s", time.monotonic() - self.started_at)
        finally:
            sweeper.cancel()

    async def _park_batch_forever(self) -> None:
        """Batch jobs park now (their tokens kept); a task that claimed its job after the
        first look is caught by the next."""
        while True:
            for job_id in [j for j in list(self.runner.active)
                           if j in self.batch_ids and j not in self.runner.preempting]:
                await self.runner.preempt(job_id)
            await asyncio.sleep(SWEEP_S)
