"""The active dispatcher's loop: wake on NOTIFY, feed the policy, carry out its decisions."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence

import psycopg
from redis import Redis

from scheduler.dispatcher import handout
from scheduler.dispatcher import metrics as sched_obs
from scheduler.dispatcher.express_lender import ExpressLender
from scheduler.dispatcher.hops import HopTraces
from scheduler.dispatcher.leader import (
    Leadership,
    LostLeadership,
    acquire_leadership,
    connect,
    wake_when_stopped,
)
from scheduler.dispatcher.sends import Sender
from scheduler.dispatcher.silence import PoolSilence
from scheduler.dispatcher.terms import run_terms
from scheduler.dispatcher.views import job_view, live_beats, worker_view
from scheduler.interface import SchedulingPolicy
from scheduler.policies import FairwayConfig, make_policy
from scheduler.types import JobClass
from service.store import handoff, tracing, wakeups
from service.store import job_queries as store
from service.store.db import sync_autocommit_session, sync_session
from service.store.heartbeats import LeaderBeat, decode_step_clock, encode_outlook
from service.store.keys import (
    LEADER_KEY,
    LEADER_TTL_S,
    OUTLOOK_TTL_S,
    WORKER_KEY_PATTERN,
    handoff_stream,
    outlook_key,
    step_clock_key,
    stream_key,
)
from service.store.outages import POSTGRES, Dependencies
from service.store.settings import Settings, to_libpq_url
from service.store.task_queue import make_celery
from service.store.telemetry.endpoint import start_metrics_endpoint

log = logging.getLogger("fairway.scheduler")

MAINTENANCE_S = 0.5
PING_EVERY_S = 0.5  # the lock's session, well within FAIRWAY_LEADER_TIMEOUT_SECONDS
OUTLOOK_EVERY_S = 0.1  # worker refresh + lease recovery cadence; realtime wakes on NOTIFY


class Dispatcher:
    def __init__(self, settings: Settings, policy: SchedulingPolicy | None = None,
                 upkeep: Sequence[Callable[[], None]] = ()) -> None:
        """``upkeep``: more work for the leader's maintenance tick, handed in by whoever runs
        the dispatcher (the CLI adds batch maintenance), so this process stays below the
        packages that own that work."""
        self.settings = settings
        self.upkeep = list(upkeep)
        self._given_policy = policy
        self.redis = Redis.from_url(settings.redis_url, socket_timeout=10,
                                    socket_connect_timeout=5)
        self.celery = make_celery(settings)
        self.deps = Dependencies(log)
        self.ident = f"{socket.gethostname()}-{os.getpid()}"
        self._new_term()

    def _new_term(self, leadership: Leadership | None = None) -> None:
        """Forget everything but the settings: each term as leader rebuilds its state from
        Postgres (``_bootstrap``), whether it follows a start, a failover or an outage.
        ``leadership``: the term's hold on the lock, whose session its claims go through (None
        outside a term, as in tests that drive the loop by hand: claims use the pool)."""
        self.leadership = leadership
        self._next_ping = 0.0
        self.policy = self._given_policy or make_policy(
            self.settings.dispatcher.policy,
            FairwayConfig(dispatch_lead_s=self.settings.dispatcher.dispatch_lead_s,
                          rt_earliest_start=self.settings.dispatcher.rt_earliest_start),
        )
        self.placed: dict[str, tuple[str, JobClass]] = {}  # job id -> (worker id, class)
        self.classes: dict[str, JobClass] = {}  # queued job id -> class, for placed
        # Fresh realtime job id -> the engine input its hand-off carries (handout.carried)
        self.bodies: dict[str, handoff.JobBody] = {}
        self.workers: set[str] = set()
        # Realtime placed whose first token we have not seen: its prefill still queues in the
        # engine, and the policy's TTFT prediction counts it until told (on_first_token).
        self.awaiting_first: set[str] = set()
        self._next_first_tokens = 0.0
        self._incarnations: dict[str, object] = {}  # worker id -> the process we last heard
        self.silence = PoolSilence(self.settings.jobs.lease_seconds)  # all keys gone at once
        # The workers an earlier term placed jobs on have a lease from the term's start to be
        # heard in this one before those jobs count as lost (``_unheard_in_grace``).
        self._grace_until = time.monotonic() + self.settings.jobs.lease_seconds
        self._next_maintenance = 0.0
        self._next_scan = 0.0
        self._next_outlook = 0.0
        self._realtime_arrived = False
        self.hops = HopTraces()  # traced jobs' hops (none while tracing is off)
        self.express = ExpressLender(self.settings.dispatcher.express_tickets)
        # Carries out this term's decisions, on this term's policy and books.
        self.sender = Sender(self.settings, self.redis, self.celery, policy=self.policy,
                             hops=self.hops, classes=self.classes, bodies=self.bodies,
                             placed=self.placed, awaiting_first=self.awaiting_first,
                             requeued=self._arrived,
                             claims=leadership.writes if leadership else None)

    # -- process -------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop``: stand by, lead, and after an outage or a lost lock start
        again; nothing a dependency does ends the process (scheduler.dispatcher.terms)."""
        start_metrics_endpoint(self.settings, role="scheduler",
                               port=self.settings.metrics.scheduler_port)
        tracing.configure(self.settings.tracing, "fairway-dispatcher")
        wake_when_stopped(self.settings.database_url, stop, lambda: self.leadership is not None)
        run_terms(self.lead, stop, self.deps, log)

    def lead(self, stop: threading.Event) -> None:
        """One term: wait for the lock, lead until ``stop`` or the lock is lost (the loop
        stalled past the leader timeout, or the connection broke: stand down, and stand by). A
        dependency's error ends the term; ``run`` backs off and starts the next."""
        sched_obs.set_leader(False)
        leadership = acquire_leadership(
            self.settings.database_url, stop, self.deps.states[POSTGRES],
            idle_timeout_s=self.settings.dispatcher.leader_timeout_seconds)
        if leadership is None:
            return
        self._new_term(leadership)
        sched_obs.set_leader(True)
        try:
            with leadership, connect(to_libpq_url(self.settings.database_url)) as listen_conn:
                listen_conn.execute(f"LISTEN {wakeups.CHANNEL}")
                self._bootstrap()
                while not stop.is_set():
                    self.step(listen_conn)
                    self.deps.ok()
        except LostLeadership as exc:
            log.error("lost the dispatcher lock (%s); standing down", exc)
        finally:
            self.leadership = None
            sched_obs.set_leader(False)

    def _bootstrap(self) -> None:
        """Rebuild the policy's state from Postgres: a new leader forgets nothing."""
        with sync_session(self.settings.database_url) as session:
            for job_id, worker_id, kind in store.active_assignments(session):
                self.placed[str(job_id)] = (worker_id, JobClass(kind))
                if kind == JobClass.REALTIME:
                    self.awaiting_first.add(str(job_id))  # the next poll clears the started
        self._maintenance()
        self._scan_queued()

    # -- one iteration -------------------------------------------------------------------------
    def step(self, listen_conn: psycopg.Connection, max_wait_s: float = MAINTENANCE_S) -> None:
        wait = max(0.0, min(max_wait_s, self._next_maintenance - time.monotonic()))
        notes = [n.payload for n in listen_conn.notifies(timeout=wait, stop_after=1)]
        if notes:  # drain whatever else already arrived, without waiting: a timeout of 0
            # polls the socket once, where 0.001 waited out its 1 ms on every wake-up, in every
            # job's time to first token (bench/hop_latency.py, the notify->disp. hop)
            notes += [n.payload for n in listen_conn.notifies(timeout=0.0)]
        self._keep_leadership()
        self._handle(notes)
        if time.monotonic() >= self._next_maintenance:
            self._maintenance()
        if time.monotonic() >= self._next_scan:
            self._scan_queued()
        if self._realtime_arrived:
            self._refresh_step_clocks()
        self._refresh_first_tokens()
        started = time.perf_counter()
        now = time.time()
        decisions = self.policy.schedule(now)
        sched_obs.observe_pass(time.perf_counter() - started, decisions)
        self.sender.act(decisions)
        self._lend_express()
        self._publish_outlook(now)

    def _keep_leadership(self) -> None:
        """Ping the lock's session: the server ends it if the loop goes silent (hung, frozen),
        and a leader that resumes after that learns it here, before it writes anything."""
        if self.leadership is None or time.monotonic() < self._next_ping:
            return
        self._next_ping = time.monotonic() + PING_EVERY_S
        self.leadership.ping()

    def _lend_express(self) -> None:
        """After every pass: the room the policy would fill at once with new realtime, lent
        to the API (scheduler.dispatcher.express_lender)."""
        if self.express.per_model < 1:
            return
        mono = time.monotonic()
        grants = self.policy.express(time.time(), self.express.held(mono),
                                     self.express.per_model)
        self.express.lend(self.redis, grants, mono)

    def _publish_outlook(self, now: float) -> None:
        """What a new realtime job of each model would wait, for the API to refuse at once
        what cannot meet its target (a few times a second, not every pass)."""
        if now < self._next_outlook:
            return
        self._next_outlook = now + OUTLOOK_EVERY_S
        outlooks = self.policy.outlook(now)
        if outlooks:
            with self.redis.pipeline(transaction=False) as pipe:
                for outlook in outlooks:
                    pipe.set(outlook_key(outlook.model), encode_outlook(outlook),
                             ex=OUTLOOK_TTL_S)
                pipe.execute()

    def _handle(self, payloads: list[str]) -> None:
        new_ids: list[uuid.UUID] = []
        unbooked: list[tuple[uuid.UUID, int, str]] = []  # placed where the policy has no room
        heard_ns = time.time_ns()
        for payload in payloads:
            match wakeups.decode(payload):
                case wakeups.JobQueued(job_id, traceparent):
                    new_ids.append(job_id)
                    self.hops.heard(job_id, traceparent, heard_ns)
                case wakeups.JobPlaced(job_id, worker_id, ticket, _traceparent, view):
                    self.express.heard(worker_id, ticket)
                    # Booked from its NOTIFY, in order: a JobEnded later in this batch then
                    # frees what it booked.
                    if not self.sender.book_placed(store.placed_queued(job_id, view),
                                                   worker_id):
                        unbooked.append((job_id, view.attempt, worker_id))
                case wakeups.JobEnded(job_id, _worker, prompt, completion):
                    self._release(str(job_id), prompt, completion)
                case wakeups.JobParked(job_id, _worker, generated):
                    # Queued again with its checkpoint: free its room, then place it anew.
                    self._release(str(job_id), 0, generated)
                    new_ids.append(job_id)
                case wakeups.JobCancelled(job_id):
                    self.policy.on_job_cancelled(str(job_id))
                    self.hops.forget(str(job_id))
                    self.classes.pop(str(job_id), None)
                    self._release(str(job_id))
                case wakeups.Rescan():
                    self._next_scan = 0.0
                case None:
                    log.warning("unreadable wake-up ignored: %.80s", payload)
        if new_ids or unbooked:  # one read each: no transaction around them
            with sync_autocommit_session(self.settings.database_url) as session:
                for job_id, attempt, worker_id in unbooked:
                    self.sender.requeue_placed(session, job_id, attempt, worker_id)
                if new_ids:
                    for job in store.fetch_queued(session, job_ids=new_ids):
                        self._arrived(job)
            self.hops.arrived()

    def _arrived(self, job: store.QueuedJob) -> None:
        view = job_view(job)
        self.classes[view.job_id] = view.job_class
        # A body kept from an earlier arrival stands unless the job was parked since (its
        # checkpoint is then the claim's to read): a rescan re-offers every queued job, and
        # each body's size check serializes its request.
        if job.generated_tokens or view.job_id not in self.bodies:
            body = handout.carried(job)
            if body is not None and len(self.bodies) < handout.BODIES_MAX:
                self.bodies[view.job_id] = body
            else:
                self.bodies.pop(view.job_id, None)
        self._realtime_arrived |= view.job_class is JobClass.REALTIME
        self.policy.on_job_arrived(view)

    def _release(self, job_id: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """0/0 usage means unknown: the policy keeps what it charged at assignment."""
        self.hops.forget(job_id)  # e.g. found by a rescan and sent before its NOTIFY was read
        self.bodies.pop(job_id, None)
        placed = self.placed.pop(job_id, None)
        self.awaiting_first.discard(job_id)
        if placed is not None:
            self.policy.on_job_finished(job_id, placed[0], prompt_tokens, completion_tokens)

    # -- periodic ------------------------------------------------------------------------------
    def _maintenance(self) -> None:
        self._next_maintenance = time.monotonic() + MAINTENANCE_S
        self.redis.set(LEADER_KEY, LeaderBeat(self.ident, time.time()).encode(),
                       ex=LEADER_TTL_S)
        self._refresh_workers()
        with sync_session(self.settings.database_url) as session:
            lost = store.requeue_expired_leases(session)
        for task in self.upkeep:  # e.g. finalize/expire batches (off-thread)
            task()
        if lost:
            log.warning("re-queued %d job(s) whose lease expired", len(lost))
            for job_id, _worker in lost:
                self._release(str(job_id))
            self._next_scan = 0.0
        sched_obs.refresh(self)  # metrics gauges, at most every few seconds

    def _refresh_workers(self) -> None:
        keys = list(self.redis.scan_iter(match=WORKER_KEY_PATTERN, count=500))
        beats = [json.loads(v) for v in self.redis.mget(keys) if v] if keys else []
        if self.silence.holds(beats, self.workers):
            return
        # A worker that missed a few beats while others beat is dead to us (its key outlives
        # it a while).
        beats = live_beats(beats, silence_s=self.settings.dispatcher.dead_worker_after_beats
                           * self.settings.worker.heartbeat_seconds)
        by_worker: dict[str, dict[str, JobClass]] = defaultdict(dict)
        for job_id, (worker_id, job_class) in self.placed.items():
            by_worker[worker_id][job_id] = job_class
        seen = set()
        for beat in beats:
            worker_id = beat["worker_id"]
            incarnation = beat.get("incarnation")
            if self._incarnations.get(worker_id, incarnation) != incarnation:
                self._worker_lost(worker_id, "was restarted")  # the old process died
                by_worker.pop(worker_id, None)
            self._incarnations[worker_id] = incarnation
            seen.add(worker_id)
            self.policy.on_worker_heartbeat(worker_view(beat, by_worker[worker_id]))
        for gone in (self.workers | set(by_worker)) - seen - self._unheard_in_grace(by_worker):
            self._worker_lost(gone)
        self.workers = seen
        self._refresh_step_clocks()

    def _unheard_in_grace(self, by_worker: dict[str, dict[str, JobClass]]) -> set[str]:
        """Workers with jobs placed before this term that it has not heard yet, while the
        term is younger than a lease: a term that follows a Redis restart starts before the
        workers' beats are back (their keys expired with the outage), and taking each for lost
        re-ran every running job. A live worker beats again within a few heartbeats; a dead
        one's jobs go back with their leases meanwhile (renewed in Postgres, not Redis)."""
        if time.monotonic() >= self._grace_until:
            return set()
        return set(by_worker) - self.workers

    def _worker_lost(self, worker_id: str, why: str = "missed its heartbeats") -> None:
        """Its jobs go back to the queue at once (not when their leases run out), so a
        streaming client waits a few heartbeats, not a lease."""
        self.policy.on_worker_lost(worker_id)
        with sync_session(self.settings.database_url) as session:
            requeued = store.requeue_worker_jobs(session, worker_id=worker_id)
        log.warning("worker %s %s; re-queued %d job(s)", worker_id, why, len(requeued))
        # Hand-offs it never read are among the re-queued (by their rows, not the stream):
        # the entries are stale now.
        self.redis.delete(handoff_stream(worker_id))
        for requeued_id in requeued:
            self._release(str(requeued_id))
        for placed_id, (owner, _) in list(self.placed.items()):
            if owner == worker_id:  # finished meanwhile, or never started there
                self._release(placed_id)
        if requeued:
            self._next_scan = 0.0

    def _refresh_step_clocks(self) -> None:
        """Engines' step clocks (worker.engine.step_clock) for realtime placement: read before a
        pass that has new realtime to place (one MGET), and with every worker refresh."""
        self._realtime_arrived = False
        workers = sorted(self.workers)
        if not workers:
            return
        raw = self.redis.mget([step_clock_key(w) for w in workers])
        for worker_id, value in zip(workers, raw, strict=True):
            # No (or no readable) clock: unknown, which the policy reads as idle, so a phase
            # from before the key expired is not extrapolated forever.
            clock = decode_step_clock(value) or (None, 0.0)
            self.policy.on_worker_step(worker_id, *clock)

    def _refresh_first_tokens(self) -> None:
        """Tell the policy which placed realtime jobs have their first token: the worker
        writes a job's token stream at its first token (its row's ``first_token_at`` may be
        stamped only at the end, service.store.lifecycle), so one pipelined EXISTS per
        awaiting job, at the outlook's cadence, lets the outlook and the next pass see the
        engines' queue as it is, without a Postgres read."""
        if not self.awaiting_first or time.monotonic() < self._next_first_tokens:
            return
        self._next_first_tokens = time.monotonic() + OUTLOOK_EVERY_S
        awaiting = list(self.awaiting_first)
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in awaiting:
                pipe.exists(stream_key(job_id))
            found = pipe.execute()
        for job_id, exists in zip(awaiting, found, strict=True):
            if exists:
                self.awaiting_first.discard(job_id)
                self.policy.on_first_token(job_id)

    def _scan_queued(self) -> None:
        """Safety net: pick up queued jobs we were not told about (bulk inserts, failover)."""
        self._next_scan = time.monotonic() + 5.0
        with sync_session(self.settings.database_url) as session:
            # Every queued job is offered again: policies ignore ids they already queue, and
            # this re-feeds any the policy let go of.
            for job in store.fetch_queued(session):
                if str(job.job_id) not in self.placed:
                    self._arrived(job)

