"""The many-hosts pass's balancer: the haproxy configuration it writes is one haproxy accepts,
with every replica checked and taken out (its sessions closed) when its checks fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from service.cli.chaos.balancer import config


def test_the_config_names_every_replica_with_its_check() -> None:
    text = config("10.77.0.9", 8000, {"api": "10.77.0.3", "api-2": "10.77.0.4"},
                  Path("haproxy.sock"))
    assert "bind 10.77.0.9:8000" in text
    assert "server api 10.77.0.3:8000 check" in text
    assert "server api-2 10.77.0.4:8000 check" in text
    assert "on-marked-down shutdown-sessions" in text
    assert "uri /healthz" in text


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(config("127.0.0.1", 18000, {"api": "127.0.0.1", "api-2": "127.0.0.2"},
                          tmp_path / "haproxy.sock"))
    checked = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
