"""The settings of every Fairway process, read from FAIRWAY_* environment variables.

`Settings` holds what every process needs (the environment, Postgres, Redis, the data
directory, the secrets) and one group per process or concern: ``settings.api``,
``settings.dispatcher``, ``settings.worker``, ``settings.engine``, ``settings.jobs``,
``settings.limits``, ``settings.batches``, ``settings.webhooks``, ``settings.metrics``,
``settings.logging``, ``settings.tracing``. A component that needs only one group is handed
only that group.

The environment variables are flat, as they always were: a field reads ``FAIRWAY_<FIELD>``
unless it names its variable (``validation_alias``), e.g. ``engine.kind`` reads
``FAIRWAY_ENGINE``. `env_var` says which. docs/settings.md's settings table is generated from these
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

from service.store.settings_groups import (
    ENV_PREFIX,
    AdapterSettings,
    ApiSettings,
    BatchSettings,
    DispatcherSettings,
    EngineSettings,
    JobSettings,
    LimitSettings,
    LoggingSettings,
    MetricsSettings,
    SettingsGroup,
    SpendSettings,
    TracingSettings,
    WebhookSettings,
    WorkerSettings,
)

# The groups live in service.store.settings_groups; importers may keep naming them here.
__all__ = [
    "ENV_PREFIX",
    "AdapterSettings",
    "ApiSettings",
    "BatchSettings",
    "DispatcherSettings",
    "EngineSettings",
    "JobSettings",
    "LimitSettings",
    "LoggingSettings",
    "MetricsSettings",
    "SettingsGroup",
    "SpendSettings",
    "TracingSettings",
    "WebhookSettings",
    "WorkerSettings",
]

DEV_SECRET = "dev-insecure-secret"
DEV_ADMIN_TOKEN = "dev-admin-token"


def default_cache_dir() -> Path:
    if env := os.environ.get("FAIRWAY_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fairway"


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
    spend: SpendSettings = Field(default_factory=SpendSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    adapters: AdapterSettings = Field(default_factory=AdapterSettings)

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
