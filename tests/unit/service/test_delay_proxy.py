"""The chaos harness's delaying TCP proxy: bytes pass unchanged and in order, a round trip
grows by the delay only while it is on, and a bad route is refused with the expected form."""

from __future__ import annotations

import argparse
import asyncio
import time

import pytest

from service.cli.chaos.delay_proxy import Delay, Route, serve


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _round_trips(delay: Delay, payloads: list[bytes]) -> tuple[list[bytes], list[float]]:
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = echo.sockets[0].getsockname()[1]
    proxies = await serve([Route("127.0.0.1", 0, "127.0.0.1", port)], delay)
    proxy_port = proxies[0].sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    got, took = [], []
    for i, payload in enumerate(payloads):
        delay.on = i % 2 == 1  # off, on, off, on ...
        started = time.monotonic()
        writer.write(payload)
        await writer.drain()
        got.append(await reader.readexactly(len(payload)))
        took.append(time.monotonic() - started)
    writer.close()
    for server in (*proxies, echo):
        server.close()
    return got, took


def test_round_trips_grow_by_the_delay_only_while_it_is_on() -> None:
    payloads = [f"ping {i} ".encode() * 200 for i in range(4)]
    got, took = asyncio.run(_round_trips(Delay(0.15), payloads))
    assert got == payloads
    assert took[0] < 0.1 and took[2] < 0.1, took
    assert 0.15 <= took[1] < 0.5 and 0.15 <= took[3] < 0.5, took


def test_a_route_needs_both_ends() -> None:
    assert Route.parse("127.0.0.1:15432=10.77.0.2:5432") == Route("127.0.0.1", 15432,
                                                                   "10.77.0.2", 5432)
    with pytest.raises(argparse.ArgumentTypeError, match="LISTEN_HOST:PORT="):
        Route.parse("127.0.0.1:15432")
