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
    scheduler_policy: str = "priority"

    # Timing
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 2.0
    realtime_deadline_seconds: float = 60.0
    flex_deadline_seconds: float = 600.0
    request_timeout_seconds: float = 600.0
    stream_ttl_seconds: int = 3600

    # Limits
    max_request_bytes: int = 1_000_000
    max_tokens_limit: int = 4096
    default_max_tokens: int = 256

    log_level: str = "INFO"

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
