"""Guesses at the admin token are throttled per client address, across API processes
(service/web/admin_guard.py). Each test speaks from an address of its own on the loopback
network (Linux answers all of 127/8), so the shared stack's other tests are not throttled."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import httpx
import pytest

from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.stack import Stack

LIMIT = 20  # FAIRWAY_ADMIN_AUTH_FAILURES_PER_MINUTE's default


def _client(base_url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=10,
                        transport=httpx.HTTPTransport(local_address=address))


def _address() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


def _guess(client: httpx.Client, token: str = "fwadm-wrong") -> httpx.Response:
    return client.get("/admin/tenants", headers={"authorization": f"Bearer {token}"})


@pytest.fixture
def replica(sim_stack: Stack) -> Iterator[str]:
    base = sim_stack.start_api_replica("api-throttle")
    yield base
    sim_stack.kill("api-throttle")


def test_admin_token_guesses_get_429_after_the_limit_on_every_replica(sim_stack: Stack,
                                                                       replica: str):
    address = _address()
    if time.time() % 60 > 50:  # the count is per minute: all of it within one
        time.sleep(61 - time.time() % 60)
    with _client(replica, address) as one, _client(sim_stack.base_url, address) as other:
        # Half the guesses on each API process: they count together.
        for i in range(LIMIT):
            assert _guess(one if i % 2 else other).status_code == 403
        started = time.monotonic()
        for client in (one, other):
            resp = _guess(client)
            assert resp.status_code == 429, resp.text
            error = resp.json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
            assert 1 <= int(resp.headers["retry-after"]) <= 60
            # The right token too: a guess answered 429 must not tell right from wrong.
            assert _guess(client, DEV_ADMIN_TOKEN).status_code == 429
        assert time.monotonic() - started < 2
    with _client(sim_stack.base_url, _address()) as elsewhere:  # another address is not held
        assert _guess(elsewhere, DEV_ADMIN_TOKEN).status_code == 200


def test_right_tokens_do_not_count(sim_stack: Stack):
    with _client(sim_stack.base_url, _address()) as client:
        for _ in range(LIMIT + 5):
            assert _guess(client, DEV_ADMIN_TOKEN).status_code == 200
        assert _guess(client).status_code == 403
