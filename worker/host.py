"""The engine host: one event loop thread that owns the engine, the job runner, heartbeats,
the abort listener and the realtime hand-off reader. Realtime jobs arrive on this worker's
hand-off stream (service.store.handoff) and run as tasks on this loop; batch jobs arrive by
Celery, whose pool threads hand this loop coroutines and wait for their results.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from redis.asyncio import Redis

from service.store import handoff, lifecycle, wakeups
from service.store.db import async_engine, async_sessionmaker_for
from service.store.heartbeats import encode_step_clock
from service.store.keys import (
    control_channel,
    handoff_stream,
    step_clock_key,
    worker_key,
)
from service.store.outages import POSTGRES, REDIS, Dependencies, is_outage
from service.store.settings import Settings
from service.store.telemetry.endpoint import start_metrics_endpoint
from worker.beat import beat_payload, key_ttl_s
from worker.drain import Drain
from worker.engine import step_clock
from worker.engine.base import Engine
from worker.engine.lora import AdapterLoads
from worker.metrics import observe_engine
from worker.phase_slot import keep_phase_slot, release_phase_slot
from worker.runner import JobRunner, engine_request_id
from worker.stream_outbox import StreamOutbox

log = logging.getLogger("fairway.worker")
T = TypeVar("T")

HANDOFF_BLOCK_MS = 5_000  # one blocking read's wait; a new read follows at once
# A reply may take this long before the connection is taken for dead. It must outlast the
# hand-off read's BLOCK: redis-py 8 gives every connection a 5 s socket timeout by default,
# and the idle read timed out every 5 s, was logged as an outage and backed off (a job placed
# meanwhile waited up to 2 s for its hand-off to be read).
REDIS_SOCKET_TIMEOUT_S = HANDOFF_BLOCK_MS / 1000 + 10
HANDOFF_READ_COUNT = 256  # entries taken per read


def worker_redis(settings: Settings) -> Redis:
    """The worker's Redis client: heartbeats, hand-off reads, token streams."""
    return Redis.from_url(settings.redis_url, max_connections=settings.redis_max_connections,
                          socket_connect_timeout=5, socket_timeout=REDIS_SOCKET_TIMEOUT_S)


class EngineHost:
    def __init__(self, engine: Engine, settings: Settings, worker_id: str,
                 phase_slot: int | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.worker_id = worker_id
        # The step phase slot claimed for this worker (worker.phase_slot), kept alive here.
        self.phase_slot = phase_slot
        self._phase_slot_lost = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="engine-loop", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []
        self._reader: asyncio.Task[None] | None = None  # the hand-off reader
        self._jobs: set[asyncio.Task[str]] = set()  # realtime jobs taken from the hand-off
        self._batch_ids: set[str] = set()  # batch jobs (Celery tasks) running here
        self.drain: Drain | None = None  # set up with the runner
        self._handoff_from = "0-0"  # the hand-off stream's entries after this id are ours
        self.runner: JobRunner | None = None
        self.deps = Dependencies(log)
        self.incarnation = f"{os.getpid()}-{time.time():.3f}"
        self.redis: Redis | None = None
        self.metrics_port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop thread and the engine; returns once the engine is ready."""
        self._thread.start()
        self.call(self._start())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.call(self._stop(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self) -> None:
        started = time.monotonic()
        await self.engine.start()
        log.info("engine ready in %.1fs", time.monotonic() - started)
        self.metrics_port = start_metrics_endpoint(self.settings, role="worker",
                                                   port=self.settings.metrics.worker_port,
                                                   instance=self.worker_id)
        self.redis = worker_redis(self.settings)
        self.outbox = StreamOutbox(self.redis, ttl_s=self.settings.jobs.stream_ttl_seconds,
                                   state=self.deps.states[REDIS])
        self.runner = JobRunner(engine=self.engine, settings=self.settings,
                                worker_id=self.worker_id,
                                sessionmaker=async_sessionmaker_for(self.settings.database_url),
                                redis=self.redis, outbox=self.outbox, deps=self.deps)
        # Before the first beat (the dispatcher places nothing here before it): entries a
        # previous process under this id left unread are not this one's (their jobs were
        # re-queued from their rows when that process was found dead).
        self._handoff_from = await self._handoff_tail()
        self.drain = Drain(runner=self.runner, realtime=lambda: self._jobs,
                           batch_ids=self._batch_ids, announce=self._beat,
                           stop_reading=self._stop_reading,
                           grace_s=self.settings.worker.drain_grace_seconds)
        await self._heartbeat_once()
        self._reader = asyncio.create_task(self._take_handoffs_forever())
        self._tasks = [asyncio.create_task(self._heartbeat_forever()), self._reader,
                       asyncio.create_task(self._listen_for_commands()),
                       asyncio.create_task(self._publish_step_clock_forever()),
                       asyncio.create_task(self.outbox.deliver_forever())]

    def begin_drain(self) -> None:
        """SIGTERM (Celery's warm shutdown begins): drain (worker.drain), from any thread."""
        if self.drain is not None:
            self.loop.call_soon_threadsafe(self.drain.begin)

    def _stop_reading(self) -> None:
        if self._reader is not None:
            self._reader.cancel()

    async def _stop(self) -> None:
        # The drain (begun by SIGTERM, or now) leaves no job running here, heartbeats and
        # lease renewals going on meanwhile; a job placed after is re-queued once this
        # worker's beat is gone.
        if self.drain is not None:
            await self.drain.begin()
        self._stop_reading()
        for task in self._tasks:
            task.cancel()
        if self.redis is not None:
            await self.redis.delete(worker_key(self.worker_id), step_clock_key(self.worker_id))
            if self.phase_slot is not None:
                await release_phase_slot(self.redis, self.engine.model_name, self.phase_slot,
                                         self.worker_id)
            await self.redis.aclose()
        await self.engine.shutdown()
        await async_engine(self.settings.database_url).dispose()

    # -- jobs ----------------------------------------------------------------------------------
    def run_job(self, job_id: str, attempt: int) -> str:
        assert self.runner is not None, "engine host not started"
        return self.call(self._run_batch(job_id, attempt))

    async def _run_batch(self, job_id: str, attempt: int) -> str:
        assert self.runner is not None
        if self.drain is not None and self.drain.draining:  # re-queued once this worker goes
            log.info("draining: batch delivery left for another worker", extra={"job_id": job_id})
            return "skipped"
        self._batch_ids.add(job_id)
        try:
            return await self.runner.run(job_id, attempt)
        finally:
            self._batch_ids.discard(job_id)

    # -- the realtime hand-off -----------------------------------------------------------------
    async def _handoff_tail(self) -> str:
        """The id of the stream's last entry. With Redis away at start, from the beginning:
        a stale entry finds its row moved on and starts nothing (``lifecycle.START``)."""
        assert self.redis is not None
        try:
            last: Any = await self.redis.xrevrange(handoff_stream(self.worker_id), count=1)
        except Exception as exc:
            if not is_outage(exc):
                raise
            self.deps.failed(exc)
            return "0-0"
        return str(last[0][0].decode()) if last else "0-0"

    async def _take_handoffs_forever(self) -> None:
        """Read this worker's hand-off stream (one blocking read takes every entry waiting)
        and start each job as a task on this loop; reads again after a Redis outage from
        where it stopped (a job whose entry is lost meanwhile is re-queued at its lease end)."""
        assert self.redis is not None
        key = handoff_stream(self.worker_id)
        failures = 0
        while True:
            try:
                reply: Any = await self.redis.xread({key: self._handoff_from},
                                               count=HANDOFF_READ_COUNT, block=HANDOFF_BLOCK_MS)
                failures = 0
            except Exception as exc:
                # Never stop reading while the heartbeat goes on: jobs would be placed here
                # and sit until their leases end.
                if is_outage(exc):
                    self.deps.failed(exc)
                else:
                    log.exception("hand-off read failed")
                failures += 1
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))
                continue
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    self._handoff_from = entry_id.decode()
                    self._take(handoff.decode(fields))

    def _take(self, message: handoff.Handoff | None) -> None:
        if message is None:
            log.warning("unreadable hand-off ignored")
            return
        assert self.runner is not None
        # A duplicate of an attempt running here is dropped at once; any other duplicate or
        # stale entry finds the row no longer assigned to that attempt and starts nothing.
        if self.runner.active.get(message.job_id) == engine_request_id(message.job_id,
                                                                       message.attempt):
            return
        task = asyncio.create_task(self.runner.run(message.job_id, message.attempt,
                                                   trace=message.trace, body=message.body,
                                                   ahead=message.ahead))
        self._jobs.add(task)
        task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Task[str]) -> None:
        self._jobs.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("realtime job task failed", exc_info=task.exception())

    # -- step clock ----------------------------------------------------------------------------
    async def _publish_step_clock_forever(self) -> None:
        """Publish the engine's step clock when it changes (worker.engine.step_clock); the
        heartbeat republishes it, so the key outlives a steady run that needs no update."""
        clock = self._step_clock()
        if clock is None:
            return
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:  # called on the engine's thread
            loop.call_soon_threadsafe(changed.set)

        clock.on_change = wake
        while True:
            await changed.wait()
            changed.clear()
            try:
                await self._publish_step_clock(clock)
            except Exception:
                log.exception("step clock publish failed")

    async def _publish_step_clock(self, clock: step_clock.StepClock) -> None:
        assert self.redis is not None
        await self.redis.set(step_clock_key(self.worker_id), encode_step_clock(clock.published),
                             ex=self._key_ttl_s())

    def _step_clock(self) -> step_clock.StepClock | None:
        """The engine's step clock, if it keeps one (both engines here do)."""
        clock = getattr(self.engine, "step_clock", None)
        return clock if isinstance(clock, step_clock.StepClock) else None

    def _key_ttl_s(self) -> int:
        return key_ttl_s(self.settings.worker)

    # -- heartbeats and leases -----------------------------------------------------------------
    async def _heartbeat_forever(self) -> None:
        # The beat and the lease renewal share one loop on purpose: renewals that went on while
        # the beat could not reach Redis kept writing checkpoints past what the job's client had
        # been streamed, and a re-queued attempt resumed from there, leaving a gap in the stream
        # (the many-hosts chaos pass, a worker cut from Redis). A hung Postgres therefore holds
        # the beat too, and the leader re-queues this worker's jobs (docs/chaos.md).
        while True:
            await asyncio.sleep(self.settings.worker.heartbeat_seconds)
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> None:
        """The beat in Redis and the leases in Postgres, each on its own: either dependency may
        be away without stopping the other (an outage is logged once, not per beat)."""
        for part, dependency in ((self._beat, REDIS), (self._renew_leases, POSTGRES)):
            await self._beat_part(part, dependency)

    async def _beat_part(self, part: Callable[[], Awaitable[None]], dependency: str) -> None:
        try:
            await part()
        except Exception as exc:
            if is_outage(exc):
                self.deps.failed(exc)
            else:
                log.exception("heartbeat failed")
        else:
            self.deps.ok(dependency)

    async def _beat(self) -> None:
        assert self.redis is not None and self.runner is not None
        stats = self.engine.stats()
        loads = getattr(self.engine, "adapter_loads", None)
        beat = beat_payload(self.engine, stats, self.settings.engine, worker_id=self.worker_id,
                            active=list(self.runner.active), metrics_port=self.metrics_port,
                            incarnation=self.incarnation,
                            draining=self.drain is not None and self.drain.draining,
                            adapters=self.runner.adapters.warm(),
                            lora=loads.config if isinstance(loads, AdapterLoads) else None,
                            load_times=(loads.load_times() if isinstance(loads, AdapterLoads)
                                        else None))
        observe_engine(self.engine.model_name, stats, len(self.runner.active))
        await self.redis.set(worker_key(self.worker_id), json.dumps(beat), ex=self._key_ttl_s())
        clock = self._step_clock()
        if clock is not None:
            await self._publish_step_clock(clock)
        if self.phase_slot is not None:
            kept = await keep_phase_slot(self.redis, self.engine.model_name, self.phase_slot,
                                         self.worker_id, self._key_ttl_s())
            if not kept and not self._phase_slot_lost:
                log.warning("step phase slot %d was taken by another worker", self.phase_slot)
            self._phase_slot_lost = not kept

    async def _renew_leases(self) -> None:
        """A live worker keeps the jobs it is running; a dead one stops renewing and the
        dispatcher re-queues. Only jobs the runner holds are renewed: an assigned job whose task
        never started here (lost message, failed claim) must expire and be re-dispatched."""
        assert self.runner is not None
        # An attempt whose claim is not in yet is not running for us yet, nor lost: its claim
        # says which (an express job's waits for its first token, worker.claim_ahead).
        held = {job_id: rid for job_id, rid in self.runner.active.items()
                if not self.runner.unclaimed(job_id)}
        if not held:
            return
        now = dt.datetime.now(dt.UTC)
        checkpoints = self.runner.due_checkpoints()
        async with self.runner.sessionmaker() as session:
            renewed = set((await session.scalars(lifecycle.renew(
                [uuid.UUID(j) for j in held], worker_id=self.worker_id,
                lease_s=self.settings.jobs.lease_seconds, now=now))).all())
            # The tokens so far: if this worker dies, the next attempt continues from them.
            for job, tokens in checkpoints:
                await session.execute(lifecycle.checkpoint(
                    job.job_id, attempt=job.attempt, worker_id=self.worker_id,
                    generated_ids=tokens, now=now))
            await session.commit()
        for job, tokens in checkpoints:
            job.saved_tokens = len(tokens)
        # A job held here but no longer running for us was cancelled or re-queued while its
        # abort command could not reach us (a Redis outage): stop it now.
        for job_id, rid in held.items():
            if uuid.UUID(job_id) not in renewed and job_id in self.runner.active:
                log.info("job no longer ours; aborting", extra={"job_id": job_id})
                await self.engine.abort(rid)

    # -- aborts --------------------------------------------------------------------------------
    async def _listen_for_commands(self) -> None:
        """The worker's control channel; resubscribes after a Redis outage (commands sent
        meanwhile are lost; the lease renewal above catches up on cancellations)."""
        assert self.redis is not None
        failures = 0
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(control_channel(self.worker_id))
                    failures = 0
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await self._command(message["data"])
            except Exception as exc:
                if not is_outage(exc):
                    raise
                self.deps.failed(exc)
                failures += 1
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))

    async def _command(self, data: bytes) -> None:
        try:
            await self._on_command(wakeups.decode_command(data))
        except Exception:
            log.exception("control command failed")

    async def _on_command(self, command: wakeups.Command | None) -> None:
        match command:
            case wakeups.AbortJob(job_id, attempt):
                await self.engine.abort(engine_request_id(job_id, attempt))
                log.info("aborted on request", extra={"job_id": job_id})
            case wakeups.PreemptJob(job_id) if self.runner is not None:
                taken = await self.runner.preempt(job_id)
                log.info("preempt %s", "started" if taken else "ignored: not running here",
                         extra={"job_id": job_id})
            case None:
                log.warning("unreadable control message ignored")
