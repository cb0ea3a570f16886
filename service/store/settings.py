"""The settings of every Fairway process, read from FAIRWAY_* environment variables.

`Settings` holds what every process needs (the environment, Postgres, Redis, the data
directory, the secrets) and one group per process or concern: ``settings.api``,
``settings.dispatcher``, ``settings.worker``, ``settings.engine``, ``settings.jobs``,
``settings.limits``, ``settings.batches``, ``settings.webhooks``, ``settings.metrics``,
``settings.logging``, ``settings.tracing``. A component that needs only one group is handed
only that group.

The environment variables are flat, as they always were: a field reads ``FAIRWAY_<FIELD>``
unless it names its variable (``validation_alias``), e.g. ``engine.kind`` reads
``FAIRWAY_ENGINE``. `env_var` says which. The README's settings table is generated from these
classes and their descriptions (`service.store.settings_doc`).

Settings are built on demand (``get_settings()``), never at import time, so tests and the
CLI can point processes at different servers. Keyword arguments override the environment
field by field, at the top level and inside a group (a group built alone reads the
environment for the fields it is not given):

    Settings(redis_url=url, engine=EngineSettings(kind="sim"))  # the rest from FAIRWAY_*
    settings.with_changes(engine={"phase_period_s": 0.5})       # a validated copy

A group may also be given as a dict (``engine={"kind": "sim"}``), read the same way; mypy
prefers the group. Subprocesses get their settings as environment variables (`child_env`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "FAIRWAY_"
DEV_SECRET = "dev-insecure-secret"
DEV_ADMIN_TOKEN = "dev-admin-token"


def default_cache_dir() -> Path:
    if env := os.environ.get("FAIRWAY_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fairway"


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
    realtime_deadline_seconds: float = Field(
        default=60.0, description="the deadline of a realtime job without its own `deadline_ms`")
    flex_deadline_seconds: float = Field(
        default=600.0, description="the deadline of a flex-tier job without its own `deadline_ms`")
    slo_admission: bool = Field(
        default=True,
        description="refuse (429 + Retry-After) a realtime request whose predicted time to "
                    "first token exceeds its tier's target, before it is queued")
    key_cache_seconds: float = Field(
        default=5.0, ge=0,
        description="how long an API process reuses a key's lookup (its tenant, tier, "
                    "revocation, expiry, suspension): a revoked key or a suspended tenant is "
                    "refused within this time on every API process; 0: look up every request")


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
    dead_worker_after_beats: float = Field(
        default=3.0, gt=1,
        description="a worker whose heartbeat is this many `FAIRWAY_HEARTBEAT_SECONDS` older "
                    "than the newest worker's is taken for dead and its jobs re-queued at once "
                    "(not at lease end), to continue from their checkpoints; a pool that went "
                    "silent all together is left to the leases")


class WorkerSettings(SettingsGroup):
    """A worker process (`fairway worker`): its identity, threads and heartbeats."""

    id: str = Field(default="", validation_alias="FAIRWAY_WORKER_ID",
                    description="the worker's id (its queue and heartbeat); empty: hostname-pid")
    realtime_headroom_slots: int = Field(
        default=4,
        description="Celery pool threads beyond the engine's `FAIRWAY_MAX_NUM_SEQS` (batch "
                    "tasks; realtime jobs come by the hand-off stream and take no thread)")
    heartbeat_seconds: float = Field(
        default=2.0,
        description="how often a worker publishes its heartbeat and renews its jobs' leases; "
                    "its keys in Redis live 5 beats (at least 5 s)")


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
    max_model_len: int = Field(default=2048,
                               description="prompt plus output tokens of one request")
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


class _CommonEnvSource(EnvSettingsSource):
    """The environment for `Settings`' own fields; each group reads its variables itself."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if _group_class(field) is not None:
            return None, field_name, False
        return super().get_field_value(field, field_name)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=None, extra="forbid")

    environment: Literal["development", "test", "production"] = Field(
        default="development",
        description="outside development the default `FAIRWAY_SECRET_KEY` and "
                    "`FAIRWAY_ADMIN_TOKEN` are refused")
    database_url: str = Field(
        default="",
        description="Postgres; empty: `fairway up` starts an embedded server under "
                    "`FAIRWAY_DATA_DIR`")
    redis_url: str = Field(
        default="",
        description="Redis; empty: `fairway up` starts an embedded server under "
                    "`FAIRWAY_DATA_DIR`")
    # redis-py's own default (100) would refuse the 101st stream.
    redis_max_connections: int = Field(
        default=4096, ge=16,
        description="Redis connections per API or worker process; every open stream holds one "
                    "while it waits for tokens, as does every running job's token writer")
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".local/share/fairway",
                           description="the embedded servers' data, and files by default")
    secret_key: str = Field(default=DEV_SECRET, description="the HMAC key for API-key hashes")
    admin_token: str = Field(default=DEV_ADMIN_TOKEN,
                             description="the admin credential (bearer token of the admin API)")

    api: ApiSettings = Field(default_factory=ApiSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    dispatcher: DispatcherSettings = Field(default_factory=DispatcherSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    batches: BatchSettings = Field(default_factory=BatchSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _CommonEnvSource(settings_cls)

    @field_validator("*", mode="before")
    @classmethod
    def _group_from_environment(cls, value: Any, info: ValidationInfo) -> Any:
        """A group given as a dict is read like ``Group(**dict)``: over the environment."""
        group = _group_class(cls.model_fields[info.field_name]) if info.field_name else None
        if group is not None and isinstance(value, dict):
            return group(**value)
        return value

    @model_validator(mode="after")
    def _refuse_default_secrets(self) -> Settings:
        if self.environment != "development":
            if self.secret_key == DEV_SECRET:
                raise ValueError("FAIRWAY_SECRET_KEY must be set outside development")
            if self.admin_token == DEV_ADMIN_TOKEN:
                raise ValueError("FAIRWAY_ADMIN_TOKEN must be set outside development")
        return self

    def with_changes(self, **changes: Any) -> Settings:
        """A validated copy with ``changes``: values for the top-level fields; for a group, a
        dict merged into it or a whole group, e.g. ``with_changes(engine={"kind": "sim"})``.
        The environment is not read again."""
        data = self.model_dump()
        for name, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(name), dict):
                data[name] = {**data[name], **value}
            else:
                data[name] = value
        return type(self).model_validate(data)

    @property
    def cache_dir(self) -> Path:
        return default_cache_dir()

    @property
    def files_root(self) -> Path:
        return self.batches.files_dir or self.data_dir / "files"

    @property
    def sqlalchemy_url(self) -> str:
        return to_sqlalchemy_url(self.database_url)


def _group_class(field: FieldInfo) -> type[SettingsGroup] | None:
    kind = field.annotation
    return kind if isinstance(kind, type) and issubclass(kind, SettingsGroup) else None


def groups() -> dict[str, type[SettingsGroup]]:
    """`Settings`' groups by field name, in declaration order."""
    found = {name: _group_class(field) for name, field in Settings.model_fields.items()}
    return {name: group for name, group in found.items() if group is not None}


def env_var(model: type[BaseSettings], field_name: str) -> str:
    """The environment variable a field of `Settings` or of a group reads."""
    alias = model.model_fields[field_name].validation_alias
    if isinstance(alias, AliasChoices):  # the first is ours; the others are standard names
        alias = alias.choices[0]
    return alias if isinstance(alias, str) else ENV_PREFIX + field_name.upper()


def to_sqlalchemy_url(url: str) -> str:
    """Accept plain postgresql:// URLs and select the psycopg (v3) driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def to_libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
