"""A TCP proxy that adds latency on demand: the kernel here has no netem, so a host whose link
should be slow reaches its peers through this proxy, run inside the host's namespace.

``python -m service.cli.chaos.delay_proxy --delay-ms 100 LISTEN=UPSTREAM ...`` forwards each
``host:port`` it listens on to its upstream ``host:port``. SIGUSR1 turns the delay on, SIGUSR2
off (it starts off), so the proxy can sit in the path from the start and the fault needs no
reconnect. The delay applies to what the host sends (as netem on its interface would): each
chunk leaves ``delay`` after it arrived, in order, so a round trip grows by the delay while
throughput does not shrink. What comes back is forwarded at once."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass

CHUNK = 65536


@dataclass
class Delay:
    seconds: float
    on: bool = False

    @property
    def now(self) -> float:
        return self.seconds if self.on else 0.0


@dataclass(frozen=True)
class Route:
    listen_host: str
    listen_port: int
    upstream_host: str
    upstream_port: int

    @staticmethod
    def parse(text: str) -> Route:
        """``LISTEN_HOST:PORT=UPSTREAM_HOST:PORT``."""
        try:
            listen, upstream = text.split("=", 1)
            lh, lp = listen.rsplit(":", 1)
            uh, up = upstream.rsplit(":", 1)
            return Route(lh, int(lp), uh, int(up))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected LISTEN_HOST:PORT=UPSTREAM_HOST:PORT") from None


async def serve(routes: list[Route], delay: Delay) -> list[asyncio.Server]:
    """Starts listening on every route; the servers run until the loop stops."""
    servers = []
    for route in routes:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         route: Route = route) -> None:
            await _relay(reader, writer, route, delay)
        servers.append(await asyncio.start_server(handle, route.listen_host,
                                                  route.listen_port))
    return servers


async def _relay(down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter,
                 route: Route, delay: Delay) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(route.upstream_host,
                                                             route.upstream_port)
    except OSError:
        down_writer.close()
        return
    try:
        await asyncio.gather(_pump(down_reader, up_writer, delay),
                             _pump(up_reader, down_writer, None))
    finally:
        for writer in (up_writer, down_writer):
            writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay: Delay | None) -> None:
    """Copies one direction until its end; with ``delay``, each chunk waits out the delay
    that was in force when it arrived (a queue keeps the order)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while data := await reader.read(CHUNK):
                await queue.put((loop.time() + (delay.now if delay else 0.0), data))
        except OSError:
            pass
        await queue.put((loop.time() + (delay.now if delay else 0.0), b""))

    reading = asyncio.create_task(read())
    try:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    except OSError:
        return
    finally:
        reading.cancel()


async def _main(routes: list[Route], delay: Delay) -> None:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(delay, "on", True))
    loop.add_signal_handler(signal.SIGUSR2, lambda: setattr(delay, "on", False))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers = await serve(routes, delay)
    print("listening", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="delay_proxy", description=__doc__)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("routes", nargs="+", type=Route.parse)
    args = parser.parse_args(argv)
    asyncio.run(_main(args.routes, Delay(args.delay_ms / 1000.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
