"""The modules a streamed chat request walks through in the API, from the route to its
response's end (auth, the door, the SLO gate, quotas, the insert, the relay), counted by tracing
one request in process: a before/after measure of how scattered the request path is.

    PYTHONPATH=. python bench/request_walk.py [--tree PATH]

Needs the local Postgres and Redis (as the tests do). The app runs in process with its
lifespan; no dispatcher or worker runs, so the model catalog is told the model exists, no
express ticket is lent (the job is queued for a dispatcher), and the relay gives up after
1 s (its timeout's error event ends the stream): the walk is the door, the insert and the
relay, the same way on every tree. ``--tree``: measure another
checkout (e.g. a git worktree of an older commit) with this script and this venv. Prints the
modules in the order first entered, and their count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGES = ("service", "scheduler", "worker")
MODEL = "walk-model"


def _module_of(filename: str, root: Path) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(root)
    except ValueError:
        return None
    if rel.parts[0] not in PACKAGES or rel.suffix != ".py":
        return None
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


async def _walk(root: Path) -> list[str]:
    import httpx

    from service.api.app import create_app
    from service.cli.bootstrap import create_tenant_with_key
    from service.store.settings import Settings
    from tests.support.services import (
        claim_redis_db,
        create_database,
        drop_database,
        release_redis_db,
    )

    database, redis = create_database("fairway_walk"), claim_redis_db()
    try:
        settings = Settings(database_url=database, redis_url=redis)
        # No worker answers: the relay gives up after a second and ends the stream.
        settings.api.request_timeout_seconds = 1.0
        _, key = create_tenant_with_key(settings, f"walk-{uuid.uuid4().hex[:6]}")
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            async def has(model: str) -> bool:
                return model == MODEL
            app.state.catalog.has = has
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://walk") as client:
                body = {"model": MODEL, "stream": True, "max_tokens": 8,
                        "messages": [{"role": "user", "content": "walk"}]}
                headers = {"Authorization": f"Bearer {key}"}
                for _ in range(2):  # warm: the key and policy caches, compiled statements
                    await _headers_of(client, body, headers)
                seen: dict[str, None] = {}

                def profile(frame: FrameType, event: str, arg: Any) -> None:
                    if event == "call":
                        module = _module_of(frame.f_code.co_filename, root)
                        if module is not None:
                            seen.setdefault(module, None)

                sys.setprofile(profile)
                try:
                    await _headers_of(client, body, headers)
                finally:
                    sys.setprofile(None)
                return list(seen)
    finally:
        release_redis_db(redis)
        drop_database(database)


async def _headers_of(client: Any, body: dict[str, Any], headers: dict[str, str]) -> None:
    """One streamed request, read to its end."""
    async with client.stream("POST", "/v1/chat/completions", json=body,
                             headers=headers) as response:
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {await response.aread()!r}")
        await response.aread()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    root = args.tree.resolve()
    sys.path.insert(0, str(root))
    os.chdir(root)
    modules = asyncio.run(_walk(root))
    by_package: dict[str, int] = {}
    for module in modules:
        top = ".".join(module.split(".")[:2])
        by_package[top] = by_package.get(top, 0) + 1
    print(f"tree: {root}")
    for module in modules:
        print(f"  {module}")
    print("by package: " + ", ".join(f"{k} {v}" for k, v in sorted(by_package.items())))
    print(f"modules walked: {len(modules)}")


if __name__ == "__main__":
    main()
