import os
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.store.settings import (
    EngineSettings,
    Settings,
    env_var,
    groups,
    to_sqlalchemy_url,
)
from service.tenants.keys import display_prefix, generate_key, hash_key

# Every FAIRWAY_* variable of the flat settings class, with a value that is not its default
# and where the value lands now. The names are the processes' interface: none may change.
OLD_VARIABLES: dict[str, tuple[str, str, Any]] = {
    "FAIRWAY_ENVIRONMENT": ("test", "environment", "test"),
    "FAIRWAY_DATABASE_URL": ("postgresql://u@h/db", "database_url", "postgresql://u@h/db"),
    "FAIRWAY_REDIS_URL": ("redis://h:1/2", "redis_url", "redis://h:1/2"),
    "FAIRWAY_REDIS_MAX_CONNECTIONS": ("512", "redis_max_connections", 512),
    "FAIRWAY_DATA_DIR": ("/srv/fairway", "data_dir", Path("/srv/fairway")),
    "FAIRWAY_SECRET_KEY": ("k", "secret_key", "k"),
    "FAIRWAY_ADMIN_TOKEN": ("t", "admin_token", "t"),
    "FAIRWAY_ENGINE": ("sim", "engine.kind", "sim"),
    "FAIRWAY_MODEL_PATH": ("/models/x", "engine.model_path", "/models/x"),
    "FAIRWAY_SERVED_MODEL_NAME": ("m", "engine.served_model_name", "m"),
    "FAIRWAY_KV_CACHE_GIB": ("3.5", "engine.kv_cache_gib", 3.5),
    "FAIRWAY_MAX_NUM_SEQS": ("8", "engine.max_num_seqs", 8),
    "FAIRWAY_MAX_MODEL_LEN": ("1024", "engine.max_model_len", 1024),
    "FAIRWAY_SIM_SPEED": ("4", "engine.sim_speed", 4.0),
    "FAIRWAY_API_HOST": ("0.0.0.0", "api.host", "0.0.0.0"),
    "FAIRWAY_API_PORT": ("8001", "api.port", 8001),
    "FAIRWAY_WORKER_ID": ("gpu-0", "worker.id", "gpu-0"),
    "FAIRWAY_SCHEDULER_POLICY": ("fcfs", "dispatcher.policy", "fcfs"),
    "FAIRWAY_DISPATCH_LEAD_S": ("0.02", "dispatcher.dispatch_lead_s", 0.02),
    "FAIRWAY_RT_EARLIEST_START": ("false", "dispatcher.rt_earliest_start", False),
    "FAIRWAY_REALTIME_HEADROOM_SLOTS": ("2", "worker.realtime_headroom_slots", 2),
    "FAIRWAY_COST_PROFILE": ("h200-llama3-8b", "engine.cost_profile", "h200-llama3-8b"),
    "FAIRWAY_PREEMPTION_MODE": ("swap", "engine.preemption_mode", "swap"),
    "FAIRWAY_KV_OFFLOAD_GIB": ("16", "engine.kv_offload_gib", 16.0),
    "FAIRWAY_GUARD_CHUNK_TOKENS": ("0", "engine.guard_chunk_tokens", 0),
    "FAIRWAY_GUARD_HOLD_S": ("5", "engine.guard_hold_s", 5.0),
    "FAIRWAY_PHASE_PERIOD_S": ("0.05", "engine.phase_period_s", 0.05),
    "FAIRWAY_LEASE_SECONDS": ("5", "jobs.lease_seconds", 5.0),
    "FAIRWAY_HEARTBEAT_SECONDS": ("0.5", "worker.heartbeat_seconds", 0.5),
    "FAIRWAY_REALTIME_DEADLINE_SECONDS": ("30", "api.realtime_deadline_seconds", 30.0),
    "FAIRWAY_FLEX_DEADLINE_SECONDS": ("900", "api.flex_deadline_seconds", 900.0),
    "FAIRWAY_REQUEST_TIMEOUT_SECONDS": ("120", "api.request_timeout_seconds", 120.0),
    "FAIRWAY_STREAM_TTL_SECONDS": ("60", "jobs.stream_ttl_seconds", 60),
    "FAIRWAY_MAX_REQUEST_BYTES": ("2000000", "limits.max_request_bytes", 2_000_000),
    "FAIRWAY_MAX_TOKENS_LIMIT": ("8192", "limits.max_tokens_limit", 8192),
    "FAIRWAY_DEFAULT_MAX_TOKENS": ("128", "limits.default_max_tokens", 128),
    "FAIRWAY_FILES_DIR": ("/srv/files", "batches.files_dir", Path("/srv/files")),
    "FAIRWAY_BATCH_MAX_FILE_BYTES": ("1048576", "batches.max_file_bytes", 1_048_576),
    "FAIRWAY_BATCH_MAX_LINES": ("10", "batches.max_lines", 10),
    "FAIRWAY_BATCH_COMPLETION_WINDOWS": ("24h,30s", "batches.completion_windows", "24h,30s"),
    "FAIRWAY_BATCH_STREAM_INTERVAL_MS": ("100", "worker.batch_stream_interval_ms", 100),
    "FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS": ("3", "batches.validation_grace_seconds", 3.0),
    "FAIRWAY_BATCH_MAINTENANCE_SECONDS": ("0.5", "batches.maintenance_seconds", 0.5),
    "FAIRWAY_FILE_EXPIRY_SWEEP_SECONDS": ("5", "batches.file_expiry_sweep_seconds", 5.0),
    "FAIRWAY_LOG_LEVEL": ("DEBUG", "logging.level", "DEBUG"),
    "FAIRWAY_LOG_FORMAT": ("text", "logging.format", "text"),
    "FAIRWAY_METRICS_ENABLED": ("false", "metrics.enabled", False),
    "FAIRWAY_METRICS_HOST": ("0.0.0.0", "metrics.host", "0.0.0.0"),
    "FAIRWAY_SCHEDULER_METRICS_PORT": ("9101", "metrics.scheduler_port", 9101),
    "FAIRWAY_WORKER_METRICS_PORT": ("9102", "metrics.worker_port", 9102),
    "FAIRWAY_METRICS_MAX_TENANTS": ("10", "metrics.max_tenants", 10),
}
# Variables added since, each with where it lands.
NEW_VARIABLES: dict[str, tuple[str, str, Any]] = {
    "FAIRWAY_DEAD_WORKER_AFTER_BEATS": ("5", "dispatcher.dead_worker_after_beats", 5.0),
    "FAIRWAY_TENANT_CACHE_ISOLATION": ("false", "engine.tenant_cache_isolation", False),
    "FAIRWAY_SLO_ADMISSION": ("false", "api.slo_admission", False),
    "FAIRWAY_WEBHOOK_TIMEOUT_SECONDS": ("2", "webhooks.timeout_seconds", 2.0),
    "FAIRWAY_WEBHOOK_BACKOFF_BASE_SECONDS": ("0.5", "webhooks.backoff_base_seconds", 0.5),
    "FAIRWAY_WEBHOOK_BACKOFF_MAX_SECONDS": ("60", "webhooks.backoff_max_seconds", 60.0),
    "FAIRWAY_WEBHOOK_RETRY_WINDOW_SECONDS": ("600", "webhooks.retry_window_seconds", 600.0),
    "FAIRWAY_WEBHOOK_POLL_SECONDS": ("0.2", "webhooks.poll_seconds", 0.2),
    "FAIRWAY_WEBHOOK_CONCURRENCY": ("3", "webhooks.concurrency", 3),
    "FAIRWAY_WEBHOOK_RETENTION_DAYS": ("7", "webhooks.retention_days", 7.0),
    "FAIRWAY_WEBHOOK_ALLOW_PRIVATE": ("true", "webhooks.allow_private", True),
    "FAIRWAY_OTEL_ENDPOINT": ("http://jaeger:4318", "tracing.endpoint", "http://jaeger:4318"),
    "FAIRWAY_OTEL_SPANS_DIR": ("/tmp/spans", "tracing.spans_dir", Path("/tmp/spans")),
    "FAIRWAY_OTEL_SAMPLE_RATIO": ("0.25", "tracing.sample_ratio", 0.25),
    "FAIRWAY_KEY_CACHE_SECONDS": ("0", "api.key_cache_seconds", 0.0),
    "FAIRWAY_FIRST_TOKEN_STAMP_SECONDS": ("2", "jobs.first_token_stamp_seconds", 2.0),
    "FAIRWAY_EXPRESS_TICKETS": ("0", "dispatcher.express_tickets", 0),
    "FAIRWAY_ENFORCE_EAGER": ("true", "engine.enforce_eager", True),
    "FAIRWAY_MAX_HEADER_BYTES": ("32768", "api.max_header_bytes", 32768),
    "FAIRWAY_HEADER_TIMEOUT_SECONDS": ("4", "api.header_timeout_seconds", 4.0),
    "FAIRWAY_ADMIN_AUTH_FAILURES_PER_MINUTE": ("5", "api.admin_auth_failures_per_minute", 5),
    "FAIRWAY_DATABASE_TIMEOUT_SECONDS": ("7", "api.database_timeout_seconds", 7.0),
    "FAIRWAY_REDIS_TIMEOUT_SECONDS": ("3", "api.redis_timeout_seconds", 3.0),
    "FAIRWAY_LEADER_TIMEOUT_SECONDS": ("8", "dispatcher.leader_timeout_seconds", 8.0),
    "FAIRWAY_WORKER_DRAIN_GRACE_SECONDS": ("12", "worker.drain_grace_seconds", 12.0),
    "FAIRWAY_API_DRAIN_DELAY_SECONDS": ("0.5", "api.drain_delay_seconds", 0.5),
    "FAIRWAY_API_DRAIN_GRACE_SECONDS": ("20", "api.drain_grace_seconds", 20.0),
    "FAIRWAY_CURRENCY": ("EUR", "spend.currency", "EUR"),
    "FAIRWAY_BUDGET_CHECK_SECONDS": ("30", "spend.budget_check_seconds", 30.0),
    "FAIRWAY_BUDGET_STOP_REFRESH_SECONDS": ("2", "spend.stop_refresh_seconds", 2.0),
    "FAIRWAY_WAITING_ROOM_SECONDS": ("30", "api.waiting_room_seconds", 30.0),
    "FAIRWAY_CATALOG_MODELS": ("a, b/c", "api.catalog_models", ["a", "b/c"]),
    "FAIRWAY_AUTOSCALE_IDLE_SECONDS": ("60", "dispatcher.autoscale_idle_seconds", 60.0),
    "FAIRWAY_TENSOR_PARALLEL_SIZE": ("2", "engine.tensor_parallel_size", 2),
    "FAIRWAY_LORA_ENABLED": ("true", "adapters.lora_enabled", True),
    "FAIRWAY_MAX_LORAS": ("2", "adapters.max_loras", 2),
    "FAIRWAY_MAX_CPU_LORAS": ("6", "adapters.max_cpu_loras", 6),
    "FAIRWAY_MAX_LORA_RANK": ("32", "adapters.max_lora_rank", 32),
    "FAIRWAY_MAX_ADAPTER_BYTES": ("1048576", "adapters.max_adapter_bytes", 1048576),
    "FAIRWAY_ADAPTER_CONCURRENT_LOADS": ("3", "adapters.adapter_concurrent_loads", 3),
    "FAIRWAY_ADAPTER_LOAD_TIMEOUT_S": ("30", "adapters.adapter_load_timeout_s", 30.0),
    "FAIRWAY_ADAPTER_IMPORT_DIR": ("adapters-in", "adapters.adapter_import_dir",
                                   Path("adapters-in")),
    "FAIRWAY_SIM_ADAPTER_LOAD_S": ("0.5", "adapters.sim_adapter_load_s", 0.5),
    "FAIRWAY_ADAPTER_URL_TIMEOUT_S": ("60", "adapters.adapter_url_timeout_s", 60.0),
    "FAIRWAY_ADAPTER_DISK_CACHE_BYTES": ("1024", "adapters.adapter_disk_cache_bytes", 1024),
}
ALL_VARIABLES = {**OLD_VARIABLES, **NEW_VARIABLES}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.upper().startswith("FAIRWAY_"):
            monkeypatch.delenv(name)
    return monkeypatch


def at(settings: Settings, path: str) -> Any:
    return reduce(getattr, path.split("."), settings)


@pytest.mark.parametrize("name", sorted(ALL_VARIABLES))
def test_every_old_variable_sets_its_field(clean_env: pytest.MonkeyPatch, name: str) -> None:
    raw, path, expected = ALL_VARIABLES[name]
    assert at(Settings(), path) != expected  # so the value below can only come from `name`
    if name == "FAIRWAY_ENVIRONMENT":  # outside development the secrets must be set
        clean_env.setenv("FAIRWAY_SECRET_KEY", "k")
        clean_env.setenv("FAIRWAY_ADMIN_TOKEN", "t")
    clean_env.setenv(name, raw)
    assert at(Settings(), path) == expected
    clean_env.setenv(name.lower(), raw)  # names are case-insensitive, as they were
    clean_env.delenv(name)
    assert at(Settings(), path) == expected


def test_the_settings_read_exactly_the_old_variables() -> None:
    names = [env_var(Settings, f) for f in Settings.model_fields if f not in groups()]
    names += [env_var(group, f) for group in groups().values() for f in group.model_fields]
    assert sorted(names) == sorted(ALL_VARIABLES)


def test_overrides_win_over_the_environment_field_by_field(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("FAIRWAY_ENGINE", "vllm")
    clean_env.setenv("FAIRWAY_MAX_NUM_SEQS", "8")
    clean_env.setenv("FAIRWAY_API_PORT", "9000")
    typed = Settings(redis_url="redis://x", engine=EngineSettings(kind="sim"))
    as_dict = Settings(redis_url="redis://x", engine={"kind": "sim"})  # type: ignore[arg-type]
    for settings in (typed, as_dict):
        assert settings.engine.kind == "sim" and settings.engine.max_num_seqs == 8
        assert settings.api.port == 9000 and settings.redis_url == "redis://x"
    with pytest.raises(ValidationError):
        Settings(served_model_name="m")  # type: ignore[call-arg]  # an old flat name: refused
    with pytest.raises(ValidationError):
        EngineSettings(max_num_seq=8)  # type: ignore[call-arg]


def test_with_changes_is_a_validated_copy(clean_env: pytest.MonkeyPatch) -> None:
    base = Settings(engine=EngineSettings(kind="vllm", max_num_seqs=8))
    clean_env.setenv("FAIRWAY_MAX_NUM_SEQS", "99")  # a copy does not read the environment
    copy = base.with_changes(redis_url="redis://y", engine={"phase_period_s": 0.5})
    assert copy.redis_url == "redis://y" and copy.engine.phase_period_s == 0.5
    assert copy.engine.kind == "vllm" and copy.engine.max_num_seqs == 8
    assert base.redis_url == "" and base.engine.phase_period_s is None
    assert base.with_changes(engine=EngineSettings(kind="sim")).engine.max_num_seqs == 99
    with pytest.raises(ValidationError):
        base.with_changes(engine={"phase_period_s": -1.0})
    with pytest.raises(ValidationError):
        base.with_changes(environment="production")  # the default secrets are refused


def test_files_root_defaults_under_the_data_dir(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("FAIRWAY_DATA_DIR", "/srv/fw")
    assert Settings().files_root == Path("/srv/fw/files")
    clean_env.setenv("FAIRWAY_FILES_DIR", "/srv/files")
    assert Settings().files_root == Path("/srv/files")


def test_default_secrets_refused_outside_development() -> None:
    with pytest.raises(ValidationError, match="SECRET_KEY"):
        Settings(environment="production")
    with pytest.raises(ValidationError, match="ADMIN_TOKEN"):
        Settings(environment="production", secret_key="s3cret-value")
    ok = Settings(environment="production", secret_key="a", admin_token="b")
    assert ok.environment == "production"


def test_default_secrets_allowed_in_development() -> None:
    assert Settings(environment="development").secret_key


def test_plain_postgres_url_gets_psycopg_driver() -> None:
    assert to_sqlalchemy_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert to_sqlalchemy_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


def test_keys_are_random_and_hash_is_keyed() -> None:
    a, b = generate_key(), generate_key()
    assert a != b and a.startswith("fw-") and len(a) > 40
    assert hash_key(a, "s1") != hash_key(a, "s2")
    assert hash_key(a, "s1") == hash_key(a, "s1")
    assert a not in hash_key(a, "s1")
    assert display_prefix(a) == a[:11]
