"""CPU per streamed token of the worker's stream outbox (worker/stream_outbox.py): `--jobs`
jobs decode in lockstep, as an engine step hands every running job its token at once, and
each job's delta goes through ``StreamOutbox.put`` to a real Redis.

    python bench/stream_writes.py [--jobs 64] [--tokens 64] [--runs 5] [--redis URL]

Prints this process's CPU microseconds per token (``time.process_time``), per run and their
median. Compare trees by running it in each (a git worktree of the other revision). Writes
to Redis db 9 of the local server by default and deletes its keys.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from redis.asyncio import Redis  # noqa: E402

from service.store import job_stream  # noqa: E402
from service.store.keys import stream_key  # noqa: E402
from service.store.outages import DependencyState  # noqa: E402
from worker.stream_outbox import StreamOutbox  # noqa: E402


async def one_run(redis_url: str, n_jobs: int, n_tokens: int) -> float:
    """CPU microseconds per token for ``n_jobs`` x ``n_tokens`` deltas in lockstep steps."""
    redis = Redis.from_url(redis_url)
    outbox = StreamOutbox(redis, ttl_s=60,
                          state=DependencyState("redis", logging.getLogger("bench")))
    jobs = [uuid.uuid4() for _ in range(n_jobs)]
    steps = [asyncio.Event() for _ in range(n_tokens)]
    written = 0

    async def decode(job: uuid.UUID) -> None:
        nonlocal written
        for t in range(n_tokens):
            await steps[t].wait()
            await outbox.put(job, job_stream.Delta(1, "tok ", 1, t * 4))
            written += 1

    tasks = [asyncio.create_task(decode(j)) for j in jobs]
    await asyncio.sleep(0.01)
    started = time.process_time()
    for t in range(n_tokens):
        steps[t].set()  # the engine step: every job's token at once
        while written < n_jobs * (t + 1):
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    cpu = time.process_time() - started
    await redis.delete(*(stream_key(j) for j in jobs))
    await redis.aclose()
    return cpu / (n_jobs * n_tokens) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=64, help="jobs decoding together")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per job")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9")
    args = parser.parse_args()
    runs = [asyncio.run(one_run(args.redis, args.jobs, args.tokens)) for _ in range(args.runs)]
    print(f"{args.jobs} jobs x {args.tokens} tokens in lockstep: CPU per token (us) "
          + " / ".join(f"{r:.1f}" for r in runs) + f"; median {statistics.median(runs):.1f}")


if __name__ == "__main__":
    main()
