"""The floor under the control plane: what the building blocks alone cost per request on this
box, so that bench/control_plane.py's figures (~10 ms of CPU per realtime job, summed over all
processes) can be set against what this Python architecture could do at best.

    python bench/control_plane_floor.py [--rungs asgi,asgi+pg,asgi+pg+redis]
                                        [--concurrency 16] [--rounds 3] [--round-s 4]

Private servers (embedded Postgres and Redis, as bench/control_plane.py) and, per rung, one
uvicorn process (uvloop/httptools where installed, no access log, heap frozen after start-up:
as `fairway api`) serving this module's `app_factory`, one route that does only:

    asgi            parse the chat request into a small pydantic model, stream 3 SSE chunks
                    and ``data: [DONE]``
    asgi+pg         the same after one INSERT (uuid, uuid, jsonb, default now()) and its
                    COMMIT through SQLAlchemy's async engine (psycopg 3, pool of 20)
    asgi+pg+redis   the same after one XADD to a per-request stream and one XREAD of it

A closed loop of `--concurrency` clients (bench/lean_client.py, a keep-alive connection each)
sends one request after another. Per rung: requests/s and CPU ms per request of each process
(psutil, above the process's idle CPU, measured just before) as medians over `--rounds`
windows, and the floor: cores x 1000 / the server side's ms per request (server, Postgres,
Redis; not the load generator), the most requests/s this box could carry if a job cost nothing
but that rung. The box is shared: "other" is CPU used by processes not ours.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from redis.asyncio import Redis
from sqlalchemy import Column, DateTime, MetaData, Table, Uuid, func, insert
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import create_async_engine

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cp_probe import CpuMeter, pg_settings, postmaster_pid  # noqa: E402
from bench.lean_client import LeanConnection  # noqa: E402
from service.cli.embedded import EmbeddedServers, free_port  # noqa: E402
from service.store.settings import to_sqlalchemy_url  # noqa: E402

RUNGS = ("asgi", "asgi+pg", "asgi+pg+redis")
ENV_RUNG, ENV_DB, ENV_REDIS = "FLOOR_RUNG", "FLOOR_DATABASE_URL", "FLOOR_REDIS_URL"
PATH = "/v1/chat/completions"
SERVER_SIDE = ("server", "postgres", "redis")  # what the floor counts; not the load generator
CREATE_TABLE = ("create table if not exists floor_jobs (id uuid primary key, tenant uuid not "
                "null, body jsonb not null, created_at timestamptz not null default now())")
JOBS = Table("floor_jobs", MetaData(), Column("id", Uuid, primary_key=True),
             Column("tenant", Uuid, nullable=False), Column("body", JSONB, nullable=False),
             Column("created_at", DateTime(timezone=True), server_default=func.now()))
INSERT_JOB = insert(JOBS)  # built once; each request binds id, tenant, body
TENANT = uuid.UUID("00000000-0000-4000-8000-000000000001")


class Message(BaseModel):
    role: str
    content: str


class ChatRequest(BaseModel):
    model: str
    messages: list[Message]
    max_tokens: int = 16
    stream: bool = False


def sse_chunks(req_id: str, model: str) -> list[bytes]:
    """Three OpenAI-shaped chunks and the [DONE] line, each a ``data:`` SSE event."""
    out = []
    for delta, finish in (({"role": "assistant"}, None), ({"content": "pong"}, None),
                          ({}, "stop")):
        chunk = {"id": req_id, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        out.append(f"data: {json.dumps(chunk)}\n\n".encode())
    return [*out, b"data: [DONE]\n\n"]


def build_app(rung: str, database_url: str = "", redis_url: str = "") -> FastAPI:
    """The server of one rung (the route and its per-request work, nothing else)."""
    if rung not in RUNGS:
        raise ValueError(f"unknown rung {rung!r}: one of {', '.join(RUNGS)}")
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if "pg" in rung:
            state["engine"] = create_async_engine(to_sqlalchemy_url(database_url),
                                                  pool_size=20, max_overflow=10)
        if "redis" in rung:
            state["redis"] = Redis.from_url(redis_url)
        yield
        if "redis" in state:
            await state["redis"].aclose()
        if "engine" in state:
            await state["engine"].dispose()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.post(PATH)
    async def chat(req: ChatRequest) -> StreamingResponse:
        job = uuid.uuid4()
        if "engine" in state:
            async with state["engine"].begin() as conn:  # one INSERT, one COMMIT
                await conn.execute(INSERT_JOB, {"id": job, "tenant": TENANT,
                                                "body": req.model_dump()})
        if "redis" in state:
            key = f"floor:{job}"
            await state["redis"].xadd(key, {"job": str(job)})
            await state["redis"].xread({key: "0-0"}, count=1)

        async def stream() -> AsyncIterator[bytes]:
            for chunk in sse_chunks(f"chatcmpl-{job.hex}", req.model):
                yield chunk

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


def app_factory() -> FastAPI:
    """uvicorn's --factory entry: the rung and the servers' URLs from the environment."""
    app = build_app(os.environ.get(ENV_RUNG, "asgi"), os.environ.get(ENV_DB, ""),
                    os.environ.get(ENV_REDIS, ""))
    gc.collect()  # as `fairway api` (freeze_startup_heap): later collections skip start-up
    gc.freeze()
    return app


def ms_per_request(cpu_s: dict[str, float], idle_cores: dict[str, float], wall_s: float,
                   requests: int) -> dict[str, float]:
    """CPU ms per request of each process over one window, less what it burns idle."""
    return {name: max(0.0, s - idle_cores.get(name, 0.0) * wall_s) / max(requests, 1) * 1e3
            for name, s in cpu_s.items()}


def server_side_ms(per_request: dict[str, float]) -> float:
    return sum(v for k, v in per_request.items() if k in SERVER_SIDE)


def floor_rps(total_ms: float, cores: int) -> float:
    """Requests/s that `cores` fully busy would carry at `total_ms` of CPU per request."""
    return cores * 1000.0 / total_ms if total_ms > 0 else float("inf")


def floor_line(rung: str, total_ms: float, cores: int) -> str:
    return (f"floor: at most {floor_rps(total_ms, cores):.0f} requests/s on this box if nothing "
            f"but {rung} ran per job ({total_ms:.2f} ms CPU per request on {cores} cores)")


@dataclass
class RungWindow:
    rps: float
    ms: dict[str, float]  # CPU ms per request per process, above idle
    other_cores: float  # CPU of processes not ours, in cores


@dataclass
class Load:
    done: int = 0
    failed: int = 0  # errors, and answers that are not 200 with data: [DONE]


async def client_loop(base: str, seed: int, load: Load, stop: asyncio.Event) -> None:
    conn = LeanConnection(base)
    body = {"model": "floor", "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": f"ping {seed}"}]}
    try:
        while not stop.is_set():
            try:
                answer = await conn.post_json(PATH, body, {})
                ok = answer.status == 200 and answer.done
            except (OSError, asyncio.IncompleteReadError, ValueError):
                ok = False
            load.done += ok
            load.failed += not ok
    finally:
        await conn.close()


async def measure(base: str, concurrency: int, rounds: int, round_s: float, meter: CpuMeter,
                  idle: dict[str, float]) -> tuple[list[RungWindow], int]:
    load, stop = Load(), asyncio.Event()
    tasks = [asyncio.create_task(client_loop(base, i, load, stop)) for i in range(concurrency)]
    await asyncio.sleep(1.5)  # warm: connections, the engine's pool, first-call caches
    windows = []
    for _ in range(rounds):
        meter.start()
        n0 = load.done
        await asyncio.sleep(round_s)
        meter.stop()
        n, cpu = load.done - n0, meter.seconds()
        other = max(0.0, meter.box_busy_s() - sum(cpu.values())) / meter.wall_s
        windows.append(RungWindow(n / meter.wall_s, ms_per_request(cpu, idle, meter.wall_s, n),
                                  other))
    stop.set()
    await asyncio.gather(*tasks)
    return windows, load.failed


def start_server(rung: str, port: int, database_url: str,
                 redis_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, ENV_RUNG: rung, ENV_DB: database_url, ENV_REDIS: redis_url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bench.control_plane_floor:app_factory", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
         "--no-access-log"], env=env, cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {rung} server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"the {rung} server was not ready in 30 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def process_groups(server_pid: int, pgdata: Path,
                   redis_pid: int) -> dict[str, Callable[[], list[int]]]:
    return {"server": lambda: [server_pid], "postgres": lambda: [postmaster_pid(pgdata)],
            "redis": lambda: [redis_pid], "load generator": lambda: [os.getpid()]}


def idle_cores(meter: CpuMeter, seconds: float) -> dict[str, float]:
    meter.start()
    time.sleep(seconds)
    meter.stop()
    return {name: s / meter.wall_s for name, s in meter.seconds().items()}


def print_rung(rung: str, windows: list[RungWindow], failed: int) -> float:
    """The rung's table; returns the server side's median ms per request."""
    rps = statistics.median(w.rps for w in windows)
    busy = statistics.median(w.ms.get("server", 0.0) * w.rps / 1e3 for w in windows)
    print(f"\n{rung}: {rps:.0f} requests/s median ("
          + " / ".join(f"{w.rps:.0f}" for w in windows) + f"), {failed} failed; the server "
          f"process at {busy:.2f} cores; other processes "
          f"{statistics.median(w.other_cores for w in windows):.2f} cores")
    rows = {name: [w.ms[name] for w in windows] for name in windows[0].ms}
    rows["total, server side"] = [server_side_ms(w.ms) for w in windows]
    rows["total, with load generator"] = [sum(w.ms.values()) for w in windows]
    print(f"  {'CPU ms per request':<28}{'median':>8}   windows")
    for name, values in rows.items():
        print(f"  {name:<28}{statistics.median(values):>8.3f}   "
              + " / ".join(f"{v:.3f}" for v in values))
    return statistics.median(rows["total, server side"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rungs", default=",".join(RUNGS), help="comma-separated, of " +
                        ", ".join(RUNGS))
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop clients")
    parser.add_argument("--rounds", type=int, default=3, help="measured windows per rung")
    parser.add_argument("--round-s", type=float, default=4.0, help="seconds per window")
    parser.add_argument("--idle-s", type=float, default=2.0, help="idle CPU measured per rung")
    args = parser.parse_args()
    rungs = [r.strip() for r in args.rungs.split(",") if r.strip()]
    if unknown := [r for r in rungs if r not in RUNGS]:
        parser.error(f"unknown rungs {unknown}: choose from {', '.join(RUNGS)}")
    cores = os.cpu_count() or 1
    data_dir = Path(tempfile.mkdtemp(prefix="fairway-floor-"))
    servers = EmbeddedServers(data_dir)
    proc: subprocess.Popen[bytes] | None = None
    floors: list[tuple[str, float]] = []
    try:
        servers.start(need_db=True, need_redis=True)
        with psycopg.connect(servers.database_url, autocommit=True) as conn:
            conn.execute(CREATE_TABLE)
        pgdata, redis_pid = data_dir / "pgdata", servers._redis.pid if servers._redis else 0
        print(f"{cores} cores; Postgres {pg_settings(servers.database_url)}")
        print(f"load: closed loop of {args.concurrency} lean clients, {args.rounds} windows of "
              f"{args.round_s:g} s per rung; CPU above each process's idle")
        for rung in rungs:
            port = free_port()
            proc = start_server(rung, port, servers.database_url, servers.redis_url)
            groups = process_groups(proc.pid, pgdata, redis_pid)
            idle = idle_cores(CpuMeter(groups), args.idle_s)
            windows, failed = asyncio.run(measure(f"http://127.0.0.1:{port}", args.concurrency,
                                                  args.rounds, args.round_s, CpuMeter(groups),
                                                  idle))
            stop_server(proc)
            proc = None
            floors.append((rung, print_rung(rung, windows, failed)))
        print()
        for rung, total in floors:
            print(floor_line(rung, total, cores))
    finally:
        if proc is not None:
            stop_server(proc)
        servers.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
