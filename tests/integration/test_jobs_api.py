"""The jobs API against real Postgres and Redis: GET /v1/jobs (filters, cursor pages, one
tenant's jobs only), POST /v1/jobs/{id}/cancel of queued, running and finished jobs, and the
`fairway jobs` CLI.

Listing runs on a stack of its own with no worker, so every job it makes stays queued and the
lists are exact; cancelling a running job needs the shared sim stack's worker.
"""

from __future__ import annotations

import io
import json
import math
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from service.cli.main import main as cli_main
from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.admin import Admin
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def idle_stack() -> Iterator[Stack]:
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
           "FAIRWAY_REQUEST_TIMEOUT_SECONDS": "120"}
    with own_stack("jobsapi", env, workers=()) as stack:
        yield stack


class Api:
    """A tenant's view of the API (plain HTTP: the SDK has no jobs resource)."""

    def __init__(self, stack: Stack, key: str) -> None:
        self.key = key
        self.http = httpx.Client(base_url=stack.base_url + "/v1", timeout=130,
                                 headers={"Authorization": f"Bearer {key}"})
        self.sdk = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0)

    def jobs(self, **params: Any) -> dict[str, Any]:
        r = self.http.get("/jobs", params=params)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def ids(self, **params: Any) -> list[str]:
        return [j["id"] for j in self.jobs(limit=100, **params)["data"]]

    def chat(self, **extra: Any) -> httpx.Response:
        return self.http.post("/chat/completions", json={
            "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            **extra})


def _job_id(response_id: str) -> str:
    return "job_" + response_id.removeprefix("resp_")


@pytest.fixture(scope="module")
def population(idle_stack: Stack) -> Iterator[dict[str, Any]]:
    """Tenant A: 3 background responses, then (a second later) a batch of 3 lines, 2 waiting
    realtime requests and a background response it cancels; tenant B: one response."""
    admin = Admin(idle_stack.base_url)
    a = Api(idle_stack, admin.create_tenant(f"a-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)[1])
    b = Api(idle_stack, admin.create_tenant(f"b-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)[1])
    early = [_job_id(a.sdk.responses.create(model=MODEL, input=f"r{i}", background=True).id)
             for i in range(3)]
    boundary = math.ceil(time.time()) + 0.01
    time.sleep(max(0.0, boundary - time.time()) + 0.05)
    lines = b"".join(json.dumps({
        "custom_id": f"l{i}", "method": "POST", "url": CHAT,
        "body": {"model": MODEL, "max_tokens": 8,
                 "messages": [{"role": "user", "content": "hello"}]}}).encode() + b"\n"
        for i in range(3))
    upload = a.sdk.files.create(file=("in.jsonl", io.BytesIO(lines)), purpose="batch")
    batch = a.sdk.batches.create(input_file_id=upload.id, endpoint=CHAT,
                                 completion_window="24h")
    wait_until(lambda: a.sdk.batches.retrieve(batch.id).status == "in_progress", 30,
               "batch in progress", idle_stack)
    pool = ThreadPoolExecutor(2)
    waiting: list[Future[httpx.Response]] = [pool.submit(a.chat),
                                             pool.submit(a.chat, service_tier="priority")]
    wait_until(lambda: len(a.ids(**{"class": "realtime"})) == 2, 30, "two realtime requests",
               idle_stack)
    cancelled = _job_id(a.sdk.responses.create(model=MODEL, input="x", background=True).id)
    r = a.http.post(f"/jobs/{cancelled}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    other = _job_id(b.sdk.responses.create(model=MODEL, input="b", background=True).id)
    yield {"a": a, "b": b, "early": early, "boundary": int(boundary), "batch_id": batch.id,
           "waiting": waiting, "cancelled": cancelled, "other": other}
    for tenant in (a, b):
        for job_id in tenant.ids(status="queued"):
            tenant.http.post(f"/jobs/{job_id}/cancel")
    pool.shutdown(wait=True, cancel_futures=True)


def test_list_is_newest_first_and_filters(population: dict[str, Any]):
    a: Api = population["a"]
    page = a.jobs()
    assert page["object"] == "list" and page["has_more"] is False
    data = page["data"]
    assert len(data) == 3 + 3 + 2 + 1
    assert [j["created_at"] for j in data] == sorted((j["created_at"] for j in data),
                                                     reverse=True)
    assert page["first_id"] == data[0]["id"] and page["last_id"] == data[-1]["id"]
    assert data[0]["id"] == population["cancelled"]  # the newest
    assert set(population["early"]) <= {j["id"] for j in data}

    assert a.ids(status="cancelled") == [population["cancelled"]]
    assert len(a.ids(status="queued")) == 8
    assert len(a.ids(**{"class": "realtime"})) == 2
    assert len(a.ids(**{"class": "batch"})) == 3 + 3 + 1
    assert set(a.ids(tier="flex")) == {*population["early"], population["cancelled"]}
    assert len(a.ids(tier="priority")) == 1
    assert len(a.ids(model=MODEL)) == 9 and a.ids(model="no-such-model") == []
    lines = a.jobs(batch_id=population["batch_id"], limit=100)["data"]
    assert sorted(j["custom_id"] for j in lines) == ["l0", "l1", "l2"]
    assert {j["batch_id"] for j in lines} == {population["batch_id"]}
    boundary = population["boundary"]
    assert set(a.ids(created_before=boundary)) == set(population["early"])
    assert len(a.ids(created_after=boundary)) == 6
    assert a.ids(created_after=boundary, created_before=boundary) == []
    assert len(a.ids(status="queued", **{"class": "batch"}, created_after=boundary)) == 3


def test_pages_walk_every_job_once(population: dict[str, Any]):
    a: Api = population["a"]
    everything = a.ids()
    seen: list[str] = []
    after: str | None = None
    while True:
        page = a.jobs(limit=2, **({"after": after} if after else {}))
        seen += [j["id"] for j in page["data"]]
        assert page["last_id"] == page["data"][-1]["id"]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == everything and len(seen) == 9
    # Pages filter too: the cursor is a place in the order, not in the filtered list.
    first = a.jobs(limit=1, **{"class": "batch"})
    rest = a.jobs(limit=100, after=first["last_id"], **{"class": "batch"})
    assert [first["data"][0]["id"]] + [j["id"] for j in rest["data"]] == a.ids(
        **{"class": "batch"})


@pytest.mark.parametrize("params", [
    {"limit": 0}, {"limit": 101}, {"after": "not-an-id"}, {"after": f"job_{uuid.uuid4().hex}"},
    {"status": "parked"}, {"class": "gpu"}, {"tier": "gold"}, {"batch_id": "nope"},
    {"created_after": -1},
])
def test_bad_list_parameters_get_400(population: dict[str, Any], params: dict[str, Any]):
    r = population["a"].http.get("/jobs", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_completed_filters_as_succeeded(idle_stack: Stack):
    """Batches and responses say `completed`; the jobs API's filter takes that word too."""
    admin = Admin(idle_stack.base_url)
    api = Api(idle_stack, admin.create_tenant(f"d-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)[1])
    assert api.jobs(status="completed")["data"] == []  # accepted, not a 400
    assert api.ids(status="completed") == api.ids(status="succeeded")


def test_other_tenants_jobs_are_invisible(population: dict[str, Any]):
    a: Api = population["a"]
    b: Api = population["b"]
    assert b.ids() == [population["other"]]
    assert population["other"] not in a.ids()
    mine = population["early"][0]
    for method, path in (("GET", f"/jobs/{mine}"), ("POST", f"/jobs/{mine}/cancel")):
        r = b.http.request(method, path)
        assert r.status_code == 404, r.text
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert b.http.get("/jobs", params={"after": mine}).status_code == 400
    assert a.http.get(f"/jobs/{mine}").json()["status"] == "queued"  # untouched


def test_cancel_a_queued_job_ends_its_waiting_request(population: dict[str, Any]):
    a: Api = population["a"]
    realtime = a.jobs(**{"class": "realtime"}, tier="default")["data"]
    assert len(realtime) == 1
    started = time.monotonic()
    r = a.http.post(f"/jobs/{realtime[0]['id']}/cancel")
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "cancelled" and job["cancelled_at"] is not None
    assert job["error"]["code"] == "cancelled"
    waited = population["waiting"][0]  # the default-tier request
    answer = waited.result(timeout=15)  # at once, not at the request timeout
    assert time.monotonic() - started < 15
    # Not a 409, which the openai SDKs resend (docs/jobs-api.md).
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "request_cancelled"
    assert answer.headers["x-should-retry"] == "false"
    # A finished job cannot be cancelled: 409 in OpenAI's shape.
    again = a.http.post(f"/jobs/{realtime[0]['id']}/cancel")
    assert again.status_code == 409
    assert again.json()["error"] == {"message": again.json()["error"]["message"],
                                     "type": "conflict_error", "param": None,
                                     "code": "invalid_state"}


def test_the_sdk_does_not_resend_a_cancelled_request(idle_stack: Stack):
    """The official SDK with its default retries, waiting on a request its owner cancels,
    gets one clear error and does not send the request again (no second job, no second
    bill)."""
    admin = Admin(idle_stack.base_url)
    api = Api(idle_stack, admin.create_tenant(f"c-{uuid.uuid4().hex[:8]}", PATIENT_PLAN)[1])
    sdk = openai.OpenAI(base_url=idle_stack.base_url + "/v1", api_key=api.key)  # 2 retries
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(sdk.chat.completions.create, model=MODEL, max_tokens=8,
                              messages=[{"role": "user", "content": "hi"}])
        wait_until(lambda: len(api.ids()) == 1, 30, "the request's job", idle_stack)
        job_id = api.ids()[0]
        assert api.http.post(f"/jobs/{job_id}/cancel").status_code == 200
        try:
            with pytest.raises(openai.BadRequestError) as refused:
                waiting.result(timeout=20)
            assert refused.value.code == "request_cancelled"
            time.sleep(1.0)  # a resend would have made its job by now
            assert api.ids() == [job_id]
        finally:
            for other in api.ids(status="queued"):
                api.http.post(f"/jobs/{other}/cancel")


def test_cli_lists_gets_and_cancels(population: dict[str, Any], idle_stack: Stack,
                                    capsys: pytest.CaptureFixture[str]):
    a: Api = population["a"]
    base = ["jobs", "--base-url", idle_stack.base_url + "/v1", "--api-key", a.key]
    assert cli_main([*base, "list", "--tier", "flex", "--limit", "1", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "STATUS", "CLASS"]  # a table under its header
    assert [line.split()[0] for line in lines[1:]] == a.ids(tier="flex")
    assert cli_main([*base, "list", "--batch-id", population["batch_id"], "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {j["custom_id"] for j in listed} == {"l0", "l1", "l2"}
    target = population["early"][1]
    assert cli_main([*base, "get", target]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == target
    assert cli_main([*base, "cancel", target]) == 0
    assert capsys.readouterr().out.strip() == f"{target}: cancelled"
    assert cli_main([*base, "cancel", target]) == 1
    assert "409" in capsys.readouterr().err


def _row(database_url: str, public_id: str) -> Job:
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(
            Job.id == uuid.UUID(public_id.split("_", 1)[1])))
        assert job is not None
        return job


def test_cancel_a_running_job_frees_its_slot_and_ends_its_stream(sim_stack: Stack, make_tenant,
                                                                 database_url):
    _, key = make_tenant()
    api = Api(sim_stack, key)
    with httpx.stream("POST", sim_stack.base_url + CHAT, timeout=120,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "max_tokens": 1500, "ignore_eos": True,
                            "stream": True,
                            "messages": [{"role": "user", "content": "go on"}]}) as stream:
        job_id = stream.headers["x-fairway-job"]
        chunks = stream.iter_lines()
        assert next(line for line in chunks if line.startswith("data: "))  # it runs
        # An express job's first token leaves before its worker's claim (docs/jobs.md, "The
        # express path"): the row says running a moment later.
        wait_until(lambda: _row(database_url, job_id).status == "running", 5, "running",
                   sim_stack)
        started = time.monotonic()
        r = api.http.post(f"/jobs/{job_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        rest = list(chunks)  # the stream ends now, and says why
        assert time.monotonic() - started < 10
    assert any('"code":"request_cancelled"' in line for line in rest), rest[-3:]
    since = time.time()
    wait_until(lambda: sim_stack.engine_idle_since("sim-1", since), 15, "engine slot freed",
               sim_stack)
    job = _row(database_url, job_id)
    assert job.status == "cancelled" and job.completion_tokens is None
    # Told at once (the abort command), not only found out at its next lease renewal.
    assert sim_stack.aborted_on_request("sim-1", job.id)
    assert api.http.get(f"/jobs/{job_id}").json()["status"] == "cancelled"


def test_cancel_a_finished_job_is_409(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    api = Api(sim_stack, key)
    done = api.sdk.chat.completions.create(model=MODEL, max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
    r = api.http.post(f"/jobs/{done.id}/cancel")
    assert r.status_code == 409, r.text
    assert r.json()["error"]["type"] == "conflict_error"
    assert api.http.get(f"/jobs/{done.id}").json()["status"] == "succeeded"
