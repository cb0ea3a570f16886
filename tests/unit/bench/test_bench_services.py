"""The benches' private Postgres/Redis: socket URLs from pgserver work as the admin URL."""

from __future__ import annotations

import shlex

from bench.embedded_services import env_lines
from tests.support.services import database_url


def test_database_url_keeps_a_socket_query() -> None:
    admin = "postgresql://postgres:@/postgres?host=/tmp/tmpabc"
    assert database_url("bench_1", admin) == "postgresql://postgres:@/bench_1?host=/tmp/tmpabc"


def test_database_url_on_tcp() -> None:
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    assert database_url("x", admin) == "postgresql://postgres@127.0.0.1:5432/x"


def test_env_lines_name_the_servers_for_the_test_helpers() -> None:
    text = env_lines("postgresql://postgres:@/postgres?host=/tmp/a b", "redis://127.0.0.1:7001/0")
    assigned = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1)
                    for line in text.splitlines())
    assert assigned == {"FAIRWAY_TEST_PG_URL": "postgresql://postgres:@/postgres?host=/tmp/a b",
                        "FAIRWAY_TEST_REDIS_URL": "redis://127.0.0.1:7001"}
