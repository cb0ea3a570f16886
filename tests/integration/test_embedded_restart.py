"""The embedded Redis after a `fairway up` killed outright: the next start stops the server the
dead run left on the data directory (they would share its append-only files) and starts from
the data it wrote out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from service.cli.child_processes import is_running
from service.cli.embedded import EmbeddedServers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

ROOT = Path(__file__).resolve().parents[2]

_SUPERVISOR = """
import sys, time
from pathlib import Path
from redis import Redis
from service.cli.embedded import EmbeddedServers
servers = EmbeddedServers(Path(sys.argv[1]))
servers.start(need_db=False, need_redis=True)
Redis.from_url(servers.redis_url).set("kept", "yes")
print(servers._redis.pid, flush=True)
time.sleep(60)
"""


def test_a_killed_runs_redis_is_stopped_and_its_data_kept(tmp_path: Path) -> None:
    supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(tmp_path)],
                                  env={**os.environ, "PYTHONPATH": str(ROOT)},
                                  stdout=subprocess.PIPE)
    assert supervisor.stdout is not None
    old = int(supervisor.stdout.readline())
    supervisor.stdout.close()
    supervisor.kill()
    supervisor.wait(5)
    servers = EmbeddedServers(tmp_path)
    try:
        assert is_running(old), "the dead run's Redis exited by itself: this test shows nothing"
        servers.start(need_db=False, need_redis=True)
        assert not is_running(old)
        assert Redis.from_url(servers.redis_url).get("kept") == b"yes"
    finally:
        servers.stop()
        if is_running(old):
            os.kill(old, signal.SIGKILL)
