"""The groups of settings, one per process or concern (``settings.api``, ``.engine``, ...),
each read from its FAIRWAY_* variables; `service.store.settings.Settings` holds one of each
(see that module for how they are read and overridden)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    SettingsConfigDict,
)

ENV_PREFIX = "FAIRWAY_"


class SettingsGroup(BaseSettings):
    """One group of settings. Built alone (``EngineSettings()``), it reads its own FAIRWAY_*
    variables, with keyword arguments winning over them."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=None, extra="forbid",
                                      validate_by_name=True, validate_by_alias=True)


class ApiSettings(SettingsGroup):
    """The API server."""

    host: str = Field(default="127.0.0.1", validation_alias="FAIRWAY_API_HOST",
                      description="the API's bind address")
    port: int = Field(default=8000, validation_alias="FAIRWAY_API_PORT",
                      description="the API's port")
    request_timeout_seconds: float = Field(
        default=600.0,
        description="how long a request waits for its job's tokens before it gives up")
    drain_delay_seconds: float = Field(
        default=2.0, ge=0, validation_alias="FAIRWAY_API_DRAIN_DELAY_SECONDS",
        description="on SIGTERM, `/readyz` answers 503 this long before the API stops "
                    "accepting connections, so a balancer stops sending it new ones first")
    drain_grace_seconds: float = Field(
        default=60.0, ge=0, validation_alias="FAIRWAY_API_DRAIN_GRACE_SECONDS",
        description="on SIGTERM, requests and streams in flight get this long to finish once "
                    "the API stops accepting; past it they are cut (their jobs still end, "
                    "`GET /v1/jobs/{id}`)")
    realtime_deadline_seconds: float = Field(
        default=60.0, description="the deadline of a realtime job without its own `deadline_ms`")
    flex_deadline_seconds: float = Field(
        default=600.0, description="the deadline of a flex-tier job without its own `deadline_ms`")
    slo_admission: bool = Field(
        default=True,
        description="refuse (429 + Retry-After) a realtime request whose predicted time to "
                    "first token exceeds its plan's target, before it is queued")
    key_cache_seconds: float = Field(
        default=5.0, ge=0,
        description="how long an API process reuses a key's lookup (its tenant, plan, "
                    "revocation, expiry, suspension): a revoked key or a suspended tenant is "
                    "refused within this time on every API process; 0: look up every request")
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024,
        description="largest request header section (request line and headers) the API "
                    "reads; past it: 431 and the connection closes")
    header_timeout_seconds: float = Field(
        default=10.0, gt=0,
        description="how long the API waits for a request's whole header section, from its "
                    "first byte (or the connection's opening); past it: 408 and the "
                    "connection closes")
    admin_auth_failures_per_minute: int = Field(
        default=20, ge=0,
        description="failed admin-token attempts one client address may make in a minute "
                    "(counted in Redis, across API processes); past them every admin request "
                    "from it gets 429 + Retry-After until the minute ends; 0: no limit")
    database_timeout_seconds: float = Field(
        default=3.0, gt=0,
        description="how long the API waits on Postgres for one statement, commit or new "
                    "connection; past it the request gets 503 + Retry-After (a Postgres that "
                    "hangs answers nothing, so nothing else ends the wait)")
    redis_timeout_seconds: float = Field(
        default=2.0, ge=1.5,
        description="how long the API waits on Redis for one command or new connection; past "
                    "it the request gets 503 + Retry-After (at least 1.5: a token stream's "
                    "blocking read waits 1 s)")
    waiting_room_seconds: float = Field(
        default=300.0, ge=0, validation_alias="FAIRWAY_WAITING_ROOM_SECONDS",
        description="a realtime request for a model no live worker serves (scaled to zero, or "
                    "its workers not up yet) waits this long for one, its job stored and "
                    "queued, while the model's autoscaler wakes a worker; past it the job ends "
                    "and the request gets 503 + Retry-After (`model_unavailable`); a stream "
                    "gets a comment line every 10 s meanwhile. Above 0, `/readyz` does not "
                    "wait for workers; 0: no waiting room, and `/readyz` is not ready while "
                    "no worker serves the configured model")
    catalog_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="FAIRWAY_CATALOG_MODELS",
        description="comma-separated models clients may name beside the configured one and "
                    "those live workers serve: models that may have no worker (scaled to "
                    "zero), listed by `GET /v1/models` and waited for in the waiting room")

    @field_validator("catalog_models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


class LimitSettings(SettingsGroup):
    """What one request may ask for (the API, and batch validation wherever it runs)."""

    max_request_bytes: int = Field(
        default=1_000_000,
        description="largest request body (uploads to /v1/files: `FAIRWAY_BATCH_MAX_FILE_BYTES`)")
    max_tokens_limit: int = Field(
        default=4096, description="largest `max_tokens` a request or batch line may ask for")
    default_max_tokens: int = Field(
        default=256, description="`max_tokens` of a request or batch line that sets none")


class JobSettings(SettingsGroup):
    """How a job runs between the processes: the dispatcher leases it to a worker, the worker
    renews the lease and streams tokens through Redis to the API."""

    lease_seconds: float = Field(
        default=30.0,
        description="a running job's lease: a job whose worker stops renewing it this long is "
                    "re-run (workers renew on every heartbeat)")
    stream_ttl_seconds: int = Field(
        default=3600, description="how long a job's token stream is kept in Redis")
    first_token_stamp_seconds: float = Field(
        default=0.5, ge=0,
        description="a running job's `first_token_at` is written this long after its first "
                    "token, if the job is still running then; a job that ends sooner carries it "
                    "in its final write (one row write fewer); 0: at once")


class DispatcherSettings(SettingsGroup):
    """The dispatcher (`fairway scheduler`) and its scheduling policy (docs/scheduler.md)."""

    policy: str = Field(default="fairway", validation_alias="FAIRWAY_SCHEDULER_POLICY",
                        description="`fairway`, or the baselines `fcfs` and `priority`")
    # From a placement decision to the job reaching the engine (claim, hand-off, the runner's
    # setup: ~10 ms at idle with Celery delivery in bench/realtime_vs_vllm.py's breakdown).
    dispatch_lead_s: float = Field(
        default=0.01,
        description="the decision-to-engine time realtime placement predicts for: it predicts "
                    "each engine's step in flight at that moment")
    rt_earliest_start: bool = Field(
        default=True,
        description="realtime goes to the worker whose engine step in flight ends first "
                    "(engines publish step clocks to Redis); false: least loaded (the A/B "
                    "baseline)")
    express_tickets: int = Field(
        default=2, ge=0, le=64, validation_alias="FAIRWAY_EXPRESS_TICKETS",
        description="realtime jobs per model the API may place on a worker at insert, without "
                    "the dispatcher's round trip, while that model's queue is empty and a "
                    "worker has room (the dispatcher lends them, docs/jobs.md \"The express "
                    "path\"); 0: every job goes through the dispatcher")
    dead_worker_after_beats: float = Field(
        default=3.0, gt=1,
        description="a worker whose heartbeat is this many `FAIRWAY_HEARTBEAT_SECONDS` older "
                    "than the newest worker's is taken for dead and its jobs re-queued at once "
                    "(not at lease end), to continue from their checkpoints; a pool that went "
                    "silent all together is left to the leases")
    leader_timeout_seconds: float = Field(
        default=5.0, ge=1,
        description="the active dispatcher pings its lock's Postgres session every half "
                    "second; one silent this long (a hung or frozen process) has its session "
                    "ended by the server, and a standby takes over (Postgres 14 or later)")
    autoscale_idle_seconds: float = Field(
        default=900.0, ge=0, validation_alias="FAIRWAY_AUTOSCALE_IDLE_SECONDS",
        description="a model with no realtime request (queued, running or ended) for this "
                    "long and no batch work due asks for zero workers "
                    "(`fairway_desired_workers{reason=\"idle\"}`); until then it keeps one "
                    "(`reason=\"warm\"`); KEDA scales it to zero only where its chart allows")


class WorkerSettings(SettingsGroup):
    """A worker process (`fairway worker`): its identity, threads and heartbeats."""

    id: str = Field(default="", validation_alias="FAIRWAY_WORKER_ID",
                    description="the worker's id (its queue and heartbeat); empty: hostname-pid")
    realtime_headroom_slots: int = Field(
        default=4,
        description="Celery pool threads beyond the engine's `FAIRWAY_MAX_NUM_SEQS` (batch "
                    "tasks; realtime jobs come by the hand-off stream and take no thread)")
    batch_stream_interval_ms: int = Field(
        default=250, ge=0,
        description="a streamed batch-class (flex) job's text after its first token goes out "
                    "at most this often, merged into one chunk: each chunk costs CPU beside "
                    "the engine, and flex has no latency goal past its first token; 0: every "
                    "token (realtime tiers always stream every token)")
    heartbeat_seconds: float = Field(
        default=1.0,
        description="how often a worker publishes its heartbeat and renews its jobs' leases; "
                    "its keys in Redis live 5 beats (at least 5 s)")
    drain_grace_seconds: float = Field(
        default=30.0, ge=0, validation_alias="FAIRWAY_WORKER_DRAIN_GRACE_SECONDS",
        description="on SIGTERM the worker drains: nothing new is placed on it, its batch jobs "
                    "park with their checkpoints at once, and its realtime streams get this "
                    "long to finish; those still running then park too and resume on another "
                    "worker from their tokens (docs/jobs.md \"Draining\")")


class EngineSettings(SettingsGroup):
    """The worker's engine (`worker.main.engine_config` turns this into the engine's config)."""

    kind: Literal["vllm", "sim"] = Field(
        default="vllm", validation_alias="FAIRWAY_ENGINE",
        description="`vllm` or `sim` (the deterministic simulated engine)")
    model_path: str = Field(
        default="",
        description="any HF model folder; empty: the default SmolLM2-135M-Instruct, converted "
                    "on first run")
    served_model_name: str = Field(default="SmolLM2-135M-Instruct",
                                   description="the name clients pass as `model`")
    kv_cache_gib: float = Field(default=2.0, description="the engine's KV cache (GiB)")
    max_num_seqs: int = Field(default=64, description="requests the engine runs at once")
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="GPUs one engine spans (vLLM's tensor parallelism); the "
                                     "worker must see that many")
    max_model_len: int = Field(default=2048,
                               description="prompt plus output tokens of one request")
    enforce_eager: bool | None = Field(
        default=None,
        description="true: the engine runs without CUDA graphs (a faster start); unset: eager "
                    "on CPU, CUDA graphs on a GPU, as vLLM does (eager decode steps measured "
                    "2.4x slower for Llama-3-8B at batch 1 on an H200, docs/scale.md)")
    sim_speed: float = Field(
        default=1.0,
        description="sim engine: >1 runs steps faster than the cost model says; `inf`: steps "
                    "cost nothing (the zero-cost engine of `bench/control_plane.py`)")
    cost_profile: str = Field(
        default="",
        description="the scheduler's cost model for this worker (`scheduler/cost_profiles.py`); "
                    "empty: chosen by device")
    preemption_mode: Literal["recompute", "swap"] = Field(
        default="recompute",
        description="what a preempted job's KV becomes: `recompute` drops it (the resume "
                    "re-prefills); `swap` keeps it in CPU memory on GPU builds (falls back to "
                    "`recompute`, recorded in the job's events, where the engine cannot "
                    "offload); see docs/preemption.md")
    kv_offload_gib: float = Field(
        default=8.0, description="swap mode: CPU memory for offloaded KV, per worker (GiB)")
    guard_chunk_tokens: int | None = Field(
        default=None, ge=0,
        description="the engine's realtime guard: batch prefill tokens per step while realtime "
                    "was seen in the last hold; unset: 480 on a GPU, 64 on CPU; 0: guard off; "
                    "see docs/scheduler.md")
    guard_hold_s: float = Field(
        default=60.0, ge=0, description="the guard's hold: how long after the last realtime "
                                        "request batch prefill stays capped")
    phase_period_s: float | None = Field(
        default=None, ge=0,
        description="step phase lock: each worker claims a slot and sizes its guarded batch "
                    "chunks so its steps end on a staggered wall-clock grid of this period, so "
                    "some worker's step always ends soon for realtime; unset: the cost "
                    "profile's (33 ms on a GPU, off on CPU); 0: off; see docs/scheduler.md")
    tenant_cache_isolation: bool = Field(
        default=True,
        description="each tenant's requests reuse prefix-cache blocks only of its own "
                    "requests (vLLM's cache_salt, keyed per tenant): a shared cache would let "
                    "one tenant learn another's prompt prefixes from timing")


class BatchSettings(SettingsGroup):
    """Files and batches (docs/batches.md)."""

    files_dir: Path | None = Field(
        default=None,
        description="where uploaded and result files are stored; unset: `<data dir>/files`")
    max_file_bytes: int = Field(default=200 * 1024 * 1024,
                                validation_alias="FAIRWAY_BATCH_MAX_FILE_BYTES",
                                description="largest uploaded file (bytes)")
    max_lines: int = Field(default=50_000, validation_alias="FAIRWAY_BATCH_MAX_LINES",
                           description="most lines in a batch input file")
    completion_windows: str = Field(
        default="24h", validation_alias="FAIRWAY_BATCH_COMPLETION_WINDOWS",
        description="allowed `completion_window` values, comma-separated, each `<n>s`, `<n>m`, "
                    "`<n>h` or `<n>d`; OpenAI accepts only `24h`, tests and demos add short "
                    "windows (e.g. `24h,30s`) to see expiry happen")
    validation_grace_seconds: float = Field(
        default=15.0, validation_alias="FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS",
        description="a batch still `validating` this long after creation, and not locked by a "
                    "live validator, is validated by the dispatcher's maintenance (the API "
                    "died mid-way)")
    maintenance_seconds: float = Field(
        default=1.0, validation_alias="FAIRWAY_BATCH_MAINTENANCE_SECONDS",
        description="how often the dispatcher's batch maintenance runs")
    file_expiry_sweep_seconds: float = Field(
        default=60.0, gt=0,
        description="how often the dispatcher deletes files past their `expires_after` (an "
                    "unindexed scan)")


class WebhookSettings(SettingsGroup):
    """Webhook delivery, run by the active dispatcher (docs/webhooks.md)."""

    timeout_seconds: float = Field(
        default=5.0, gt=0, validation_alias="FAIRWAY_WEBHOOK_TIMEOUT_SECONDS",
        description="how long one delivery waits for the endpoint's answer (connect and read); "
                    "no 2xx by then is a failed attempt")
    backoff_base_seconds: float = Field(
        default=5.0, gt=0, validation_alias="FAIRWAY_WEBHOOK_BACKOFF_BASE_SECONDS",
        description="the wait after a first failed attempt; it doubles with each further "
                    "failure (with +-20% jitter) up to `FAIRWAY_WEBHOOK_BACKOFF_MAX_SECONDS`")
    backoff_max_seconds: float = Field(
        default=3600.0, gt=0, validation_alias="FAIRWAY_WEBHOOK_BACKOFF_MAX_SECONDS",
        description="the longest wait between two attempts")
    retry_window_seconds: float = Field(
        default=86400.0, gt=0, validation_alias="FAIRWAY_WEBHOOK_RETRY_WINDOW_SECONDS",
        description="how long after its event a delivery is retried; the delivery is marked "
                    "`failed` once its next attempt would fall past this")
    poll_seconds: float = Field(
        default=0.5, gt=0, validation_alias="FAIRWAY_WEBHOOK_POLL_SECONDS",
        description="how often the dispatcher looks for due deliveries")
    concurrency: int = Field(
        default=8, ge=1, le=256, validation_alias="FAIRWAY_WEBHOOK_CONCURRENCY",
        description="deliveries a dispatcher sends at once")
    retention_days: float = Field(
        default=30.0, gt=0, validation_alias="FAIRWAY_WEBHOOK_RETENTION_DAYS",
        description="events older than this are deleted with their delivery logs (swept by the "
                    "dispatcher every 10 minutes); events with a pending delivery are kept")
    allow_private: bool = Field(
        default=False, validation_alias="FAIRWAY_WEBHOOK_ALLOW_PRIVATE",
        description="allow webhook URLs on private, loopback and link-local addresses "
                    "(refused by default, at registration and again at each delivery); for "
                    "receivers on an on-premises private network")


class SpendSettings(SettingsGroup):
    """Spend in money and budgets (docs/spend.md)."""

    currency: str = Field(
        default="USD", min_length=1, max_length=8, validation_alias="FAIRWAY_CURRENCY",
        description="the currency prices and budgets are in: a label shown with every amount "
                    "(nothing is converted)")
    budget_check_seconds: float = Field(
        default=15.0, gt=0, validation_alias="FAIRWAY_BUDGET_CHECK_SECONDS",
        description="how often the active dispatcher compares each budgeted tenant's month "
                    "so far with its budget, sends the thresholds' alerts and sets or lifts "
                    "hard stops")
    stop_refresh_seconds: float = Field(
        default=5.0, gt=0, validation_alias="FAIRWAY_BUDGET_STOP_REFRESH_SECONDS",
        description="how long an API process trusts its list of tenants stopped by a spent "
                    "budget before reading it again")


class MetricsSettings(SettingsGroup):
    """Metrics (docs/observability.md). The API serves /metrics on its own port; the dispatcher
    and workers serve their own, published in Redis (and in a worker's heartbeat)."""

    enabled: bool = Field(
        default=True, validation_alias="FAIRWAY_METRICS_ENABLED",
        description="record metrics and serve /metrics; false: every observer is a no-op")
    host: str = Field(default="127.0.0.1", validation_alias="FAIRWAY_METRICS_HOST",
                      description="bind address of the dispatcher's and workers' /metrics (the "
                                  "API serves its own on its port)")
    scheduler_port: int = Field(default=0, validation_alias="FAIRWAY_SCHEDULER_METRICS_PORT",
                                description="the dispatcher's metrics port; 0: a free one, "
                                            "published in Redis")
    worker_port: int = Field(default=0, validation_alias="FAIRWAY_WORKER_METRICS_PORT",
                             description="a worker's metrics port; 0: a free one, published in "
                                         "Redis and in its heartbeat")
    max_tenants: int = Field(
        default=100, validation_alias="FAIRWAY_METRICS_MAX_TENANTS",
        description="tenants named in metric labels (the busiest by recent requests); the "
                    "rest report as `other`")


class LoggingSettings(SettingsGroup):
    """Logs (docs/observability.md)."""

    level: str = Field(default="INFO", validation_alias="FAIRWAY_LOG_LEVEL",
                       description="the log level (`DEBUG`, `INFO`, `WARNING`, ...)")
    format: Literal["json", "text"] = Field(
        default="json", validation_alias="FAIRWAY_LOG_FORMAT",
        description="JSON lines, or one-line text; both keep prompts, outputs and keys out")


class TracingSettings(SettingsGroup):
    """OpenTelemetry tracing (docs/observability.md): one span per hop of a job. Off unless an
    endpoint or a spans directory is set."""

    endpoint: str = Field(
        default="",
        validation_alias=AliasChoices("FAIRWAY_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="the OTLP/HTTP collector spans go to (e.g. `http://jaeger:4318`; "
                    "`OTEL_EXPORTER_OTLP_ENDPOINT` is read too); empty: none")
    spans_dir: Path | None = Field(
        default=None, validation_alias="FAIRWAY_OTEL_SPANS_DIR",
        description="also write spans as JSON lines here, a file per process (benches, tests)")
    sample_ratio: float = Field(
        default=1.0, ge=0.0, le=1.0, validation_alias="FAIRWAY_OTEL_SAMPLE_RATIO",
        description="the share of requests traced (a trace's later hops follow its first)")

    @property
    def on(self) -> bool:
        return bool(self.endpoint) or self.spans_dir is not None


class AdapterSettings(SettingsGroup):
    """Tenants' LoRA adapters: what the API accepts and how workers serve them
    (docs/adapters.md)."""

    lora_enabled: bool = Field(
        default=False,
        description="workers start vLLM with LoRA enabled, so requests may name a tenant's "
                    "adapter (`ft:<base>:<tenant>:<name>`); off: such requests fail on the worker")
    max_loras: int = Field(default=4, ge=1,
                           description="adapters one engine step may batch together (slots)")
    max_cpu_loras: int = Field(
        default=8, ge=1,
        description="adapters a worker keeps loaded (least recently used goes first); at least "
                    "`FAIRWAY_MAX_LORAS`")
    max_lora_rank: int = Field(
        default=16, ge=1, description="the largest LoRA rank uploaded adapters may have, and the "
                                      "rank workers size their LoRA buffers for")
    max_adapter_bytes: int = Field(default=256 * 1024 * 1024, ge=1,
                                   description="largest adapter upload (the archive, bytes)")
    adapter_load_timeout_s: float = Field(
        default=120.0, gt=0,
        description="a worker's fetch and load of one adapter; longer fails the request")
    adapter_concurrent_loads: int = Field(
        default=2, ge=1, description="adapter loads one worker runs at once (others wait)")
    sim_adapter_load_s: float = Field(
        default=0.2, ge=0, description="sim engine: the modelled time to load an adapter")
    adapter_import_dir: Path | None = Field(
        default=None,
        description="admins may register a tenant's adapter from a folder under this "
                    "directory of the API's host (`POST /admin/tenants/{id}/adapters`); "
                    "unset: registering by path is off")
    adapter_url_timeout_s: float = Field(
        default=300.0, gt=0,
        description="an admin's registration by URL: the whole download of the archive; "
                    "longer is refused")
    adapter_disk_cache_bytes: int = Field(
        default=2 * 1024**3, ge=0,
        description="a worker's fetched adapter files on its disk: past this, the least "
                    "recently used adapters' folders are removed (never one loaded or being "
                    "fetched)")

    @model_validator(mode="after")
    def _cache_holds_the_slots(self) -> AdapterSettings:
        # vLLM refuses to start otherwise; say so when the settings are read instead.
        if self.max_cpu_loras < self.max_loras:
            raise ValueError("FAIRWAY_MAX_CPU_LORAS must be at least FAIRWAY_MAX_LORAS")
        return self
