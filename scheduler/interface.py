"""The interface the dispatcher (and the simulator) drive a policy through.

Call order, per dispatcher wake-up: any number of ``on_*`` notifications, then
``schedule(now)``; the dispatcher carries out the returned decisions and reports their
outcome back through the ``on_*`` methods. A policy never performs I/O.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping

from scheduler.outlook import RealtimeOutlook
from scheduler.types import Decision, ExpressGrant, JobView, WorkerView


class PolicyKind(enum.StrEnum):
    FCFS = "fcfs"
    PRIORITY = "priority"  # strict priority, then arrival
    FAIRWAY = "fairway"  # tiers + weighted fair share + deadlines (scheduler-core issue)


class SchedulingPolicy(abc.ABC):
    @abc.abstractmethod
    def on_job_arrived(self, job: JobView) -> None:
        """Called once when a job becomes queued (new, or back after a lost lease/preemption)."""

    @abc.abstractmethod
    def on_job_cancelled(self, job_id: str) -> None:
        """Called when a queued job is withdrawn before it was assigned (client gone, cancel)."""

    @abc.abstractmethod
    def on_job_finished(
        self, job_id: str, worker_id: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Called when an assigned job ends on a worker, whatever the outcome."""

    @abc.abstractmethod
    def on_worker_heartbeat(self, worker: WorkerView) -> None:
        """Called for every heartbeat; replaces what the policy knew about that worker."""

    def on_worker_step(  # noqa: B027 (optional hook: a no-op unless a policy times placement)
        self, worker_id: str, started_at: float | None, step_s: float
    ) -> None:
        """Called when a fresher engine step clock is known: the worker's current step started
        at ``started_at`` (the policy's clock) and its steps last about ``step_s``; None = the
        engine is idle. The simulator calls it at every planned step; the dispatcher before a
        pass that has realtime to place. Policies that do not time placement ignore it."""

    def on_first_token(self, job_id: str) -> None:  # noqa: B027 (optional hook, as above)
        """Called once when an assigned job's first output token has come (the engine's
        prefill of it is done). Admission counts the prompts of realtime assigned and still
        without one as prefill queued in the engines; a policy never told keeps counting them
        until the job ends. The simulator calls it at the step that samples the token; the
        dispatcher when it sees the job row's ``first_token_at``."""

    @abc.abstractmethod
    def on_worker_lost(self, worker_id: str) -> None:
        """Called when a worker's heartbeat expired; its jobs come back via on_job_arrived."""

    @abc.abstractmethod
    def schedule(self, now: float) -> list[Decision]:
        """Called after notifications; returns what to do now. Assigned jobs leave the queue."""

    def outlook(self, now: float) -> list[RealtimeOutlook]:
        """What a new realtime job of each model would wait now, for admission at the door
        (scheduler.outlook). Policies without an admission model return none."""
        return []

    def express(self, now: float, held: Mapping[str, int], per_model: int) -> list[ExpressGrant]:
        """Room to lend the API for realtime jobs that arrive before the next pass: each grant
        lets the API place up to its tickets of a model's new realtime jobs on one worker at
        insert, skipping the dispatcher's round trip (docs/jobs.md, "The express path").
        ``held``: tickets per worker taken since lent and not yet reported back through
        ``on_job_placed``; ``per_model``: the most tickets to lend a model. A policy lends
        only where it would place such a job at once anyway. Default: none."""
        return []

    def on_job_placed(self, job: JobView, worker_id: str) -> bool:
        """A realtime job the API placed on ``worker_id`` with a ticket from ``express``: it
        runs there now, charged as if this policy had assigned it. False: the policy cannot
        take it (the worker is gone, or it lends no tickets), and the caller queues it."""
        return False

    def num_queued(self) -> int:
        """Jobs waiting for a decision (convenience; policies may override)."""
        return 0
