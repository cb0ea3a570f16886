"""Batch ingest bench: upload a generated 50,000-line, ~200 MB JSONL file and create a batch.

Prints lines/s, the wall time from the start of the upload until the batch is `in_progress`
(every line validated and inserted as a job), and the peak RSS of the API process.
Targets: <= 5 s to in_progress, <= 300 MB RSS.

Runs against a throwaway database on the Postgres named by FAIRWAY_BENCH_PG_URL (default:
postgres on localhost) and starts its own API process; no dispatcher or worker runs, so the
jobs stay queued. Usage, from the repository root:

    python bench/batch_ingest.py [--lines 50000] [--line-bytes 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
import psycopg  # noqa: E402

from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.cli.embedded import free_port  # noqa: E402
from service.store.migrate import upgrade  # noqa: E402
from service.store.settings import Settings  # noqa: E402

PG_ADMIN = os.environ.get("FAIRWAY_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MODEL = "bench-model"


def generate(path: Path, lines: int, line_bytes: int) -> int:
    filler = ("lorem ipsum dolor sit amet " * (line_bytes // 27 + 1))
    with path.open("w") as fh:
        for i in range(lines):
            head = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": MODEL, "max_tokens": 16, "temperature": 0,
                             "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": ""}]}}
            pad = line_bytes - len(json.dumps(head)) - 1
            head["body"]["messages"][1]["content"] = f"{i} " + filler[:max(0, pad - 8)]
            fh.write(json.dumps(head) + "\n")
    return path.stat().st_size


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--line-bytes", type=int, default=4000)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fairway-bench-ingest-"))
    db_name = f"fairway_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    db_url = PG_ADMIN.rsplit("/", 1)[0] + "/" + db_name
    api = None
    try:
        upgrade(db_url)
        settings = Settings(database_url=db_url, redis_url="redis://127.0.0.1:6379/15")
        _, key = create_tenant_with_key(settings, "bench")
        source = work / "input.jsonl"
        size = generate(source, args.lines, args.line_bytes)
        print(f"generated {args.lines} lines, {size / 1e6:.1f} MB")
        port = free_port()
        env = {**os.environ, "FAIRWAY_DATABASE_URL": db_url,
               "FAIRWAY_REDIS_URL": settings.redis_url, "FAIRWAY_FILES_DIR": str(work / "files"),
               "FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_LOG_LEVEL": "WARNING",
               "PYTHONPATH": str(ROOT)}
        api = subprocess.Popen([sys.executable, "-m", "service.cli.main", "api", "--port",
                                str(port)], cwd=ROOT, env=env)
        wait_http(f"http://127.0.0.1:{port}/healthz")
        rss_idle = peak_rss_mb(api.pid)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key,
                               timeout=600, max_retries=0)
        t0 = time.perf_counter()
        with source.open("rb") as fh:
            uploaded = client.files.create(file=("input.jsonl", fh), purpose="batch")
        t_upload = time.perf_counter() - t0
        batch = client.batches.create(input_file_id=uploaded.id,
                                      endpoint="/v1/chat/completions", completion_window="24h")
        while batch.status == "validating":
            time.sleep(0.05)
            batch = client.batches.retrieve(batch.id)
        wall = time.perf_counter() - t0
        counts = batch.request_counts
        print(f"status:            {batch.status} (total {counts.total}, "
              f"failed {counts.failed})")
        print(f"upload:            {t_upload:.2f} s ({size / 1e6 / t_upload:.0f} MB/s)")
        print(f"validate + insert: {wall - t_upload:.2f} s")
        print(f"to in_progress:    {wall:.2f} s   (target <= 5 s)")
        print(f"lines/s:           {args.lines / wall:,.0f}")
        print(f"API peak RSS:      {peak_rss_mb(api.pid):.0f} MB   (idle {rss_idle:.0f} MB; "
              f"target <= 300 MB)")
        return 0 if batch.status == "in_progress" else 1
    finally:
        if api is not None:
            api.terminate()
            api.wait(20)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
