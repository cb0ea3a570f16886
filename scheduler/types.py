"""Plain data objects that cross the policy boundary.

The dispatcher builds these from database rows and worker heartbeats; the policy never sees
an ORM object, a connection or a clock it did not receive as an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from scheduler.cost_model import CostModel


class JobClass(enum.StrEnum):
    REALTIME = "realtime"
    BATCH = "batch"


@dataclass(slots=True)
class JobView:
    """What the policy knows about one queued job."""

    job_id: str
    tenant_id: str
    job_class: JobClass
    priority: int  # lower runs first (vLLM's convention); see scheduler.tiers
    model: str
    arrival: float  # seconds, the dispatcher's clock
    deadline: float | None  # absolute seconds on the same clock; None = no deadline
    prompt_tokens: int  # estimate when the exact count is unknown
    max_tokens: int
    tenant_weight: float = 1.0
    prefix_key: str | None = None  # hash of the shared prompt prefix, for cache affinity
    prefix_tokens: int = 0  # that prefix's length (estimate): what a cache hit saves
    # Realtime TTFT target in seconds; None = the policy's default for the job's priority.
    ttft_slo_s: float | None = None
    # Its plan's ``queue`` admission mode: the longest predicted wait before its prefill
    # starts that it is admitted with (the target then only orders work). None: ``shed``
    # mode, refused when its predicted TTFT misses the target.
    max_wait_s: float | None = None
    # Output tokens already produced before a preemption (the checkpoint); the resumed job's
    # prompt_tokens include them, so they count as work lost if it is preempted again.
    generated_tokens: int = 0
    # Placed before and back in the queue (its worker was lost, or it was preempted): it was
    # admitted once, and its client may already hold tokens, so it is never refused for SLO.
    requeued: bool = False
    # The LoRA adapter the job runs with (its id or name, one namespace per deployment);
    # None: the base model alone.
    adapter: str | None = None

    def __repr__(self) -> str:  # log-safe: ids and sizes only
        return (
            f"JobView({self.job_id}, tenant={self.tenant_id}, {self.job_class}, "
            f"prio={self.priority}, in={self.prompt_tokens}, max_out={self.max_tokens})"
        )


@dataclass(slots=True)
class WorkerView:
    """A worker as its latest heartbeat describes it."""

    worker_id: str
    models: tuple[str, ...]
    max_slots: int  # concurrent sequences the engine runs
    running: int  # sequences running or waiting inside the engine
    kv_capacity_tokens: int
    kv_used_tokens: int
    last_seen: float
    # Jobs the dispatcher has sent here and not yet seen finish: id -> class.
    assigned: dict[str, JobClass] = field(default_factory=dict)
    # Output tokens generated so far per running job, when the engine reports it; the
    # victim choice uses it for "work lost" and falls back to elapsed time without it.
    progress: dict[str, int] = field(default_factory=dict)
    # This worker's engine cost model; None = the policy's default profile.
    cost: CostModel | None = None
    # The jobs this heartbeat counted in ``running`` (empty when the worker does not say).
    # A job that finishes after the beat frees its slot at once instead of a beat later.
    running_ids: frozenset[str] = frozenset()
    # LoRA: the adapters this engine holds loaded (least recently used first), how many
    # distinct adapters one engine step may batch (vLLM ``max_loras``) and how many it keeps
    # loaded in CPU memory (``max_cpu_loras``). 0 = not said: vLLM's defaults (1, max_loras).
    adapters: tuple[str, ...] = ()
    max_loras: int = 0
    max_cpu_loras: int = 0
    # The median of this engine's recent adapter loads, in seconds; None: none measured yet.
    adapter_load_s: float | None = None

    @property
    def free_slots(self) -> int:
        return max(0, self.max_slots - max(self.running, len(self.assigned)))


@dataclass(frozen=True, slots=True)
class Assign:
    job_id: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """Take a running batch job back from a worker so realtime work can use the room."""

    job_id: str
    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str
    retry_after_s: float


Decision = Assign | Preempt | Reject


@dataclass(frozen=True, slots=True)
class ExpressGrant:
    """Room the policy lends the API ahead of any job (``SchedulingPolicy.express``): up to
    ``tickets`` realtime jobs of ``model`` may go straight to ``worker_id``, placed by the
    API at insert, while the model's queue is empty. Not a decision: nothing is sent."""

    model: str
    worker_id: str
    tickets: int
