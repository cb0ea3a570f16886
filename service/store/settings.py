"""One settings object for every Fairway process, read from FAIRWAY_* environment variables.

Settings are built on demand (``get_settings()``), never at import time, so tests and the
CLI can point processes at different servers.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_SECRET = "dev-insecure-secret"
DEV_ADMIN_TOKEN = "dev-admin-token"


def default_cache_dir() -> Path:
    if env := os.environ.get("FAIRWAY_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fairway"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FAIRWAY_", env_file=None, extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    # Empty means "start the embedded servers" (fairway up only).
    database_url: str = ""
    redis_url: str = ""
    # Connections per process to Redis. Every open streaming request holds one while it
    # waits for tokens (XREAD BLOCK), as does every running job's token writer in a worker;
    # redis-py's own default (100) would refuse the 101st stream.
    redis_max_connections: int = Field(default=4096, ge=16)
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".local/share/fairway")

    # Secrets: the HMAC key for API-key hashes, and the admin credential.
    secret_key: str = DEV_SECRET
    admin_token: str = DEV_ADMIN_TOKEN

    # Engine
    engine: Literal["vllm", "sim"] = "vllm"
    model_path: str = ""  # empty: the default SmolLM2-135M-Instruct, converted on first run
    served_model_name: str = "SmolLM2-135M-Instruct"
    kv_cache_gib: float = 2.0
    max_num_seqs: int = 64
    max_model_len: int = 2048
    sim_speed: float = 1.0  # sim engine: >1 runs steps faster than the cost model says

    # Processes
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    worker_id: str = ""  # empty: hostname + pid
    scheduler_policy: str = "fairway"
    # From a placement decision to the job reaching the engine (claim, Celery delivery, the
    # runner's setup: ~10 ms at idle in bench/realtime_vs_vllm.py's breakdown). Realtime
    # placement predicts each engine's step in flight at that moment (docs/scheduler.md).
    dispatch_lead_s: float = 0.01
    rt_earliest_start: bool = True  # False: realtime placed least loaded (the A/B baseline)
    # Extra Celery threads beyond the engine's max_num_seqs, so realtime work taken from batch
    # reaches the engine while the victims are still draining (see docs/preemption.md).
    realtime_headroom_slots: int = 4
    cost_profile: str = ""  # scheduler cost model for this worker; empty: chosen by device
    # What a preempted job's KV becomes (docs/preemption.md, "Preemption modes"): "recompute"
    # drops it (the resume re-prefills prompt + checkpoint); "swap" keeps it in CPU memory via
    # vLLM's KV offloading connector, where the engine can (CUDA builds only). Elsewhere swap
    # falls back to recompute, and the job's events say so.
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    kv_offload_gib: float = 8.0  # swap mode: CPU memory for offloaded KV, per worker
    # The engine's realtime guard (docs/scheduler.md, "Realtime guard"): batch prefill tokens
    # per step while realtime is around. None: 480 on a GPU, 64 on CPU; 0: off.
    guard_chunk_tokens: int | None = Field(default=None, ge=0)
    guard_hold_s: float = Field(default=60.0, ge=0)
    # The step phase lock (scheduler.step_phase): guarded engine steps end on a grid of this
    # period, offset by the worker's phase slot. None: the cost profile's phase_period_s()
    # (33 ms on h200-llama3-8b, off on cpu-smollm2-135m); 0: off.
    phase_period_s: float | None = Field(default=None, ge=0)

    # Timing
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 2.0
    # The dispatcher takes a worker for dead, and re-queues its jobs, after this many missed
    # heartbeats (not the lease): a kill -9 costs a streaming client ~3 beats.
    dead_worker_after_beats: float = Field(default=3.0, gt=1)
    realtime_deadline_seconds: float = 60.0
    flex_deadline_seconds: float = 600.0
    request_timeout_seconds: float = 600.0
    stream_ttl_seconds: int = 3600

    # Limits
    max_request_bytes: int = 1_000_000
    max_tokens_limit: int = 4096
    default_max_tokens: int = 256

    # Files and batches (docs/batches.md)
    files_dir: Path | None = None  # local storage backend; empty: <data_dir>/files
    batch_max_file_bytes: int = 200 * 1024 * 1024
    batch_max_lines: int = 50_000
    # Allowed completion_window values, comma-separated, each <n>s|m|h|d. OpenAI accepts
    # only "24h"; tests and demos add short windows (e.g. "24h,30s") to see expiry happen.
    batch_completion_windows: str = "24h"
    # A batch still `validating` this long after creation, and not locked by a live
    # validator, is validated by the dispatcher's maintenance (the API died mid-way).
    batch_validation_grace_seconds: float = 15.0
    batch_maintenance_seconds: float = 1.0
    # How often the dispatcher deletes files past their expires_after (an unindexed scan).
    file_expiry_sweep_seconds: float = Field(default=60.0, gt=0)

    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"

    # Observability (docs/observability.md). Metrics ports: 0 picks a free port and publishes
    # it in Redis (and in the worker's heartbeat); the API serves /metrics on its own port.
    metrics_enabled: bool = True
    metrics_host: str = "127.0.0.1"
    scheduler_metrics_port: int = 0
    worker_metrics_port: int = 0
    metrics_max_tenants: int = 100  # distinct tenant label values; more report as "other"

    @model_validator(mode="after")
    def _refuse_default_secrets(self) -> Settings:
        if self.environment != "development":
            if self.secret_key == DEV_SECRET:
                raise ValueError("FAIRWAY_SECRET_KEY must be set outside development")
            if self.admin_token == DEV_ADMIN_TOKEN:
                raise ValueError("FAIRWAY_ADMIN_TOKEN must be set outside development")
        return self

    @property
    def cache_dir(self) -> Path:
        return default_cache_dir()

    @property
    def files_root(self) -> Path:
        return self.files_dir or self.data_dir / "files"

    @property
    def sqlalchemy_url(self) -> str:
        return to_sqlalchemy_url(self.database_url)


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
