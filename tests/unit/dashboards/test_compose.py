"""compose.yaml validates with docker-compose (offline) and keeps the services we document."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[3] / "compose.yaml"
SECRETS = {"FAIRWAY_SECRET_KEY": "test-secret", "FAIRWAY_ADMIN_TOKEN": "test-admin"}


def _compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is missing in CI (.ci/run installs it)")
        pytest.skip("docker-compose not installed (Debian package docker-compose)")
    return binary


def _config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_compose(), "-f", str(COMPOSE), "config"], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)


def test_compose_file_validates():
    result = _config(SECRETS)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert {"postgres", "redis", "migrate", "api", "scheduler", "worker"} <= set(
        config["services"])
    worker = config["services"]["worker"]
    assert worker["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    for name in ("postgres", "redis", "api", "worker"):
        assert "healthcheck" in config["services"][name]


def test_tracing_is_off_unless_asked_and_then_goes_to_jaeger():
    services = yaml.safe_load(_config(SECRETS).stdout)["services"]
    assert "jaeger" in services
    assert not services["api"]["environment"]["FAIRWAY_OTEL_ENDPOINT"]
    traced = yaml.safe_load(_config({**SECRETS, "FAIRWAY_OTEL_ENDPOINT": "http://jaeger:4318"}
                                    ).stdout)["services"]
    for name in ("api", "scheduler", "worker"):
        assert traced[name]["environment"]["FAIRWAY_OTEL_ENDPOINT"] == "http://jaeger:4318"


def test_compose_refuses_to_start_without_secrets():
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    result = subprocess.run([_compose(), "-f", str(COMPOSE), "config", "-q"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode != 0 and "FAIRWAY_SECRET_KEY" in result.stderr
