"""Batches through the official openai SDK against real processes (sim engine): the whole
flow, cancel mid-run, expiry, a worker crash mid-batch, tenant isolation, limits.

This module runs its own stack (own database, Redis db, files dir) because it needs settings
the shared sim_stack does not have: short completion windows, small upload limits, and a
files directory inside the test's temp dir.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from sqlalchemy import func, select

from service.store.db import sync_session
from service.store.models.batches import Batch
from service.store.models.files import StoredFile
from service.store.models.jobs import Job
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def batch_stack() -> Iterator[Stack]:
    env = {
        "FAIRWAY_SERVED_MODEL_NAME": MODEL,
        "FAIRWAY_LEASE_SECONDS": "3",
        "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
        "FAIRWAY_MAX_NUM_SEQS": "8",
        "FAIRWAY_BATCH_COMPLETION_WINDOWS": "24h,6s",
        "FAIRWAY_BATCH_MAX_LINES": "300",
        "FAIRWAY_BATCH_MAX_FILE_BYTES": "300000",
        "FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS": "2",
        "FAIRWAY_BATCH_MAINTENANCE_SECONDS": "0.3",
        "FAIRWAY_FILE_EXPIRY_SWEEP_SECONDS": "0.5",
    }
    with own_stack("batch", env, workers=("bsim-1",)) as stack:
        yield stack


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=30)


def request_line(custom_id: str, content: str = "hello", max_tokens: int = 8,
                 model: str = MODEL) -> dict[str, object]:
    return {"custom_id": custom_id, "method": "POST", "url": CHAT,
            "body": {"model": model, "max_tokens": max_tokens, "temperature": 0,
                     "messages": [{"role": "user", "content": content}]}}


def jsonl(lines: list[object]) -> bytes:
    return b"".join((json.dumps(x) if not isinstance(x, str) else x).encode() + b"\n"
                    for x in lines)


def submit(api: openai.OpenAI, data: bytes, window: str = "24h", **kw: object):  # type: ignore[no-untyped-def]
    f = api.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    return api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window=window,
                              **kw)  # type: ignore[arg-type]


def wait_status(api: openai.OpenAI, batch_id: str, statuses: set[str], timeout_s: float = 60):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = api.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        time.sleep(0.2)
    raise TimeoutError(f"batch {batch_id} stuck in {batch.status}")


def read_lines(api: openai.OpenAI, file_id: str | None) -> list[dict]:  # type: ignore[type-arg]
    if file_id is None:
        return []
    return [json.loads(x) for x in api.files.content(file_id).text.splitlines() if x]


def assert_every_line_once(api: openai.OpenAI, batch, custom_ids: set[str]) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    out = read_lines(api, batch.output_file_id)
    err = read_lines(api, batch.error_file_id)
    seen = [x["custom_id"] for x in out + err]
    assert sorted(seen, key=str) == sorted(custom_ids, key=str), "every line ends exactly once"
    assert batch.request_counts.completed == len(out)
    # Cancelled lines (never run, or aborted) are counted apart from failed ones; both are
    # in the error file.
    cancelled = (batch.request_counts.model_extra or {}).get("cancelled", 0)
    assert batch.request_counts.failed + cancelled == len(err)
    assert batch.request_counts.total == len(custom_ids)
    return out, err


def test_whole_flow_with_a_bad_line(batch_stack: Stack, make_tenant_for_stack):
    api = client(batch_stack, make_tenant_for_stack())
    lines = [request_line(f"r{i}", f"question {i}") for i in range(5)]
    lines.insert(2, "{this is not json")
    batch = submit(api, jsonl(lines), metadata={"job": "nightly"})
    assert batch.status == "validating" and batch.metadata == {"job": "nightly"}
    done = wait_status(api, batch.id, {"completed", "failed"})
    assert done.status == "completed", done
    out, err = assert_every_line_once(api, done, {f"r{i}" for i in range(5)} | {None})
    for entry in out:
        assert entry["id"].startswith("batch_req_") and entry["error"] is None
        assert entry["response"]["status_code"] == 200
        body = entry["response"]["body"]
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] <= 8
    assert err == [{"id": None, "custom_id": None, "response": None,
                    "error": {"code": "invalid_json", "line": 3, "param": None,
                              "message": err[0]["error"]["message"]}}]
    assert done.errors.data[0].line == 3 and done.errors.data[0].code == "invalid_json"
    assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at
    assert done.usage.output_tokens == sum(
        e["response"]["body"]["usage"]["completion_tokens"] for e in out)
    # The same answers as the realtime path gives (deterministic decoding).
    realtime = api.chat.completions.create(**{**request_line("x", "question 0")["body"]})
    by_id = {e["custom_id"]: e for e in out}
    assert by_id["r0"]["response"]["body"]["choices"][0]["message"]["content"] == \
        realtime.choices[0].message.content
    output_file = api.files.retrieve(done.output_file_id)
    assert output_file.purpose == "batch_output"


def test_files_endpoints_and_batch_listing(batch_stack: Stack, make_tenant_for_stack):
    api = client(batch_stack, make_tenant_for_stack())
    data = jsonl([request_line("a")])
    f = api.files.create(file=("one.jsonl", io.BytesIO(data)), purpose="batch")
    assert (f.bytes, f.filename, f.purpose, f.object) == (len(data), "one.jsonl", "batch", "file")
    assert api.files.retrieve(f.id).id == f.id
    assert api.files.content(f.id).content == data
    assert f.id in [x.id for x in api.files.list()]
    ids = [api.batches.create(input_file_id=f.id, endpoint=CHAT,
                              completion_window="24h").id for _ in range(3)]
    page1 = api.batches.list(limit=2)
    assert [b.id for b in page1.data] == ids[::-1][:2] and page1.has_more
    page2 = api.batches.list(limit=2, after=page1.data[-1].id)
    assert [b.id for b in page2.data] == [ids[0]] and not page2.has_more
    for batch_id in ids:
        wait_status(api, batch_id, {"completed"})
    deleted = api.files.delete(f.id)
    assert deleted.deleted
    with pytest.raises(openai.NotFoundError):
        api.files.retrieve(f.id)


def test_expired_files_are_gone_then_deleted(batch_stack: Stack, make_tenant_for_stack):
    api = client(batch_stack, make_tenant_for_stack())
    data = jsonl([request_line("a")])
    f = api.files.create(file=("exp.jsonl", io.BytesIO(data)), purpose="batch",
                         extra_body={"expires_after[anchor]": "created_at",
                                     "expires_after[seconds]": "3600"})
    keep = api.files.create(file=("keep.jsonl", io.BytesIO(data)), purpose="batch")
    assert f.expires_at is not None and f.expires_at - f.created_at == 3600
    file_id = uuid.UUID(f.id.removeprefix("file-"))
    with sync_session(batch_stack.database_url) as session:
        row = session.get(StoredFile, file_id)
        assert row is not None
        key = row.storage_key
        row.expires_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)  # an hour later
        session.commit()
    path = Path(batch_stack.env_overrides["FAIRWAY_FILES_DIR"]) / key
    # Gone to clients at once, sweep or not.
    with pytest.raises(openai.NotFoundError):
        api.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")
    assert f.id not in [x.id for x in api.files.list()] and keep.id in [
        x.id for x in api.files.list()]

    def swept() -> bool:
        with sync_session(batch_stack.database_url) as session:
            return session.get(StoredFile, file_id) is None

    wait_until(swept, 15, "the dispatcher deleting the expired file", batch_stack)
    assert not path.exists()
    assert api.files.content(keep.id).content == data


def test_limits_and_whole_file_failures(batch_stack: Stack, make_tenant_for_stack):
    api = client(batch_stack, make_tenant_for_stack())
    with pytest.raises(openai.APIStatusError) as too_many:
        api.files.create(file=("big.jsonl", io.BytesIO(b"{}\n" * 301)), purpose="batch")
    assert too_many.value.status_code == 413
    assert too_many.value.body["code"] == "too_many_lines"
    with pytest.raises(openai.APIStatusError) as too_big:
        api.files.create(file=("big.jsonl", io.BytesIO(b"x" * 300_001)), purpose="batch")
    assert too_big.value.status_code == 413
    with pytest.raises(openai.BadRequestError):
        submit(api, jsonl([request_line("a")]), window="1h")
    # Wrong as a whole: nothing valid, or a model nobody serves.
    bad = wait_status(api, submit(api, b"nope\n{}\n").id, {"failed"})
    assert bad.errors.data[0].code == "no_valid_lines" and bad.failed_at
    assert [e.line for e in bad.errors.data[1:]] == [1, 2]
    unknown = wait_status(api, submit(api, jsonl([request_line("a", model="nobody")])).id,
                          {"failed"})
    assert unknown.errors.data[0].code == "model_not_found"


def test_tenant_isolation(batch_stack: Stack, make_tenant_for_stack):
    owner = client(batch_stack, make_tenant_for_stack())
    other = client(batch_stack, make_tenant_for_stack())
    batch = submit(owner, jsonl([request_line("a")]))
    for call in (lambda: other.batches.retrieve(batch.id),
                 lambda: other.batches.cancel(batch.id),
                 lambda: other.files.retrieve(batch.input_file_id),
                 lambda: other.files.content(batch.input_file_id),
                 lambda: other.files.delete(batch.input_file_id),
                 lambda: other.batches.create(input_file_id=batch.input_file_id, endpoint=CHAT,
                                              completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert other.batches.list().data == [] and other.files.list().data == []
    done = wait_status(owner, batch.id, {"completed"})
    with pytest.raises(openai.NotFoundError):
        other.files.content(done.output_file_id)


def _statuses(database_url: str, batch_id: str) -> dict[str, int]:
    with sync_session(database_url) as session:
        rows = session.execute(select(Job.status, func.count()).where(
            Job.batch_id == uuid.UUID(batch_id.removeprefix("batch_")))
            .group_by(Job.status)).all()
    return {status: n for status, n in rows}


def test_cancel_mid_run(batch_stack: Stack, make_tenant_for_stack):
    """Cancel stops every unfinished line at once, the running ones too (aborted on their
    worker), and counts them cancelled, not failed."""
    api = client(batch_stack, make_tenant_for_stack())
    ids = {f"c{i}" for i in range(60)}
    long = [{**request_line(c), "body": {**request_line(c, max_tokens=1500)["body"],
                                         "ignore_eos": True}} for c in sorted(ids)]
    batch = submit(api, jsonl(long))
    wait_until(lambda: _statuses(batch_stack.database_url, batch.id).get("running", 0) >= 1,
               60, "lines running", batch_stack)
    started = time.monotonic()
    cancelling = api.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    left = _statuses(batch_stack.database_url, batch.id)
    assert not left.keys() & {"queued", "assigned", "running"}, left
    counts = cancelling.request_counts
    assert counts.failed == 0 and (counts.model_extra or {})["cancelled"] >= 50, counts
    done = wait_status(api, batch.id, {"cancelled"})
    assert time.monotonic() - started < 10  # not when its running lines would have ended
    out, err = assert_every_line_once(api, done, ids)
    assert done.request_counts.failed == 0
    assert (done.request_counts.model_extra or {})["cancelled"] == len(err) >= 50
    assert done.request_counts.completed == len(out)
    assert {e["error"]["code"] for e in err} == {"batch_cancelled"}
    assert api.batches.cancel(batch.id).status == "cancelled"  # idempotent
    since = time.time()
    wait_until(lambda: batch_stack.engine_idle_since("bsim-1", since), 15, "engine freed",
               batch_stack)


def test_expiry_sends_unfinished_lines_to_the_error_file(batch_stack: Stack,
                                                         make_tenant_for_stack):
    api = client(batch_stack, make_tenant_for_stack())
    ids = {f"e{i}" for i in range(80)}
    batch = submit(api, jsonl([request_line(c, max_tokens=128) for c in sorted(ids)]),
                   window="6s")
    assert batch.expires_at - batch.created_at == 6
    done = wait_status(api, batch.id, {"expired", "completed"}, timeout_s=40)
    assert done.status == "expired" and done.expired_at >= done.expires_at
    _out, err = assert_every_line_once(api, done, ids)
    expired = [e for e in err if e["error"] and e["error"]["code"] == "batch_expired"]
    assert expired and all(e["response"] is None for e in expired)
    assert _statuses(batch_stack.database_url, batch.id).keys() <= {"succeeded", "cancelled"}


def test_worker_crash_mid_batch_every_line_once(batch_stack: Stack, make_tenant_for_stack):
    model = "sim-bcrash"  # only the crash workers serve it
    slow = {"FAIRWAY_SERVED_MODEL_NAME": model, "FAIRWAY_SIM_SPEED": "0.5"}
    batch_stack.start_worker("bcrash-a", **slow)
    api = client(batch_stack, make_tenant_for_stack())
    ids = {f"k{i}" for i in range(24)}
    batch = submit(api, jsonl([request_line(c, max_tokens=40, model=model)
                               for c in sorted(ids)]))

    def running_on_a() -> bool:
        with sync_session(batch_stack.database_url) as session:
            return (session.scalar(select(func.count()).where(
                Job.worker_id == "bcrash-a", Job.status == "running",
                Job.first_token_at.is_not(None))) or 0) > 0

    wait_until(running_on_a, 60, "batch lines running on bcrash-a", batch_stack)
    batch_stack.kill("worker-bcrash-a")
    batch_stack.start_worker("bcrash-b", **slow)
    done = wait_status(api, batch.id, {"completed"}, timeout_s=120)
    out, err = assert_every_line_once(api, done, ids)
    assert not err and len(out) == len(ids)
    with sync_session(batch_stack.database_url) as session:
        attempts = session.scalars(select(Job.attempt).where(
            Job.batch_id == uuid.UUID(done.id.removeprefix("batch_")))).all()
    assert max(attempts) >= 2  # the killed worker's lines ran again
    batch_stack.kill("worker-bcrash-b")


def test_validation_resumes_after_the_api_died(batch_stack: Stack, make_tenant_for_stack):
    """A batch left in `validating` with no live validator is picked up by the dispatcher."""
    key = make_tenant_for_stack()
    api = client(batch_stack, key)
    f = api.files.create(file=("in.jsonl", io.BytesIO(jsonl([request_line("z")]))),
                         purpose="batch")
    with sync_session(batch_stack.database_url) as session:
        source = session.get(StoredFile, uuid.UUID(f.id.removeprefix("file-")))
        assert source is not None
        now = dt.datetime.now(dt.UTC)
        batch = Batch(tenant_id=source.tenant_id, endpoint=CHAT, input_file_id=source.id,
                      completion_window="24h", status="validating", created_at=now,
                      expires_at=now + dt.timedelta(hours=24), total=0, invalid_lines=0)
        session.add(batch)
        session.commit()
        batch_id = batch.public_id
    done = wait_status(api, batch_id, {"completed"}, timeout_s=30)
    assert_every_line_once(api, done, {"z"})


@pytest.fixture
def make_tenant_for_stack(batch_stack: Stack):  # type: ignore[no-untyped-def]
    from service.cli.bootstrap import create_tenant_with_key
    from service.store.settings import Settings

    settings = Settings(database_url=batch_stack.database_url, redis_url=batch_stack.redis_url)

    def _make() -> str:
        return create_tenant_with_key(settings, f"b-{uuid.uuid4().hex[:8]}")[1]

    return _make




def test_cli_submit_wait_downloads_results(batch_stack: Stack, make_tenant_for_stack,
                                           tmp_path, capsys):
    from service.cli.main import main

    key = make_tenant_for_stack()
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl([request_line("a"), request_line("b"), request_line("a")]))
    out = tmp_path / "out.jsonl"
    base = ["batch", "--base-url", batch_stack.base_url + "/v1", "--api-key", key]
    code = main([*base, "submit", str(source), "--wait", "--output", str(out)])
    assert code == 0, capsys.readouterr()
    assert sorted(json.loads(x)["custom_id"] for x in out.read_text().splitlines()) == ["a", "b"]
    errors = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert [(e["custom_id"], e["error"]["code"], e["error"]["line"]) for e in errors] == [
        ("a", "duplicate_custom_id", 3)]
    printed = capsys.readouterr().out
    assert "completed" in printed
    assert main([*base, "list"]) == 0 and "completed" in capsys.readouterr().out
