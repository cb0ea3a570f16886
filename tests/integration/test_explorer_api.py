"""The explorer's admin API: a job or batch found by every id a user quotes (job_, chatcmpl-,
batch_, batch_req_, an output line's req_, file-, a UUID, a custom_id within its batch), a
job's timeline and facts, a batch's files, counts and slowest and failed lines; 404 in
OpenAI's error shape for an unknown id; the admin credential required."""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.support.admin import Admin
from tests.support.explorer import WORKER, finished_batch, slow_job
from tests.support.stack import Stack

MODEL = "sim-model"


@pytest.fixture(scope="module")
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


@pytest.fixture(scope="module")
def tenant(admin: Admin) -> dict[str, str]:
    name = f"explore-{uuid.uuid4().hex[:8]}"
    tid, key = admin.create_tenant(name)
    return {"id": tid, "key": key, "name": name}


def _found(admin: Admin, q: str, **params: str) -> dict[str, Any]:
    return admin.ok("GET", "/admin/search", params={"q": q, **params})


def test_a_realtime_request_by_its_answer_id_and_its_job_id(sim_stack: Stack, admin: Admin,
                                                            tenant: dict[str, str]):
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=tenant["key"])
    answer = api.chat.completions.create(model=MODEL, max_tokens=4,
                                         messages=[{"role": "user", "content": "hi"}])
    hexed = answer.id.removeprefix("chatcmpl-")
    for q in (answer.id, f"job_{hexed}", str(uuid.UUID(hexed)), f"  job_{hexed} "):
        found = _found(admin, q)
        assert (found["kind"], found["id"]) == ("job", f"job_{hexed}"), q
        assert found["url"] == f"/admin/jobs/job_{hexed}"
    assert _found(admin, answer.id)["matched_as"] == "job_id"
    assert _found(admin, str(uuid.UUID(hexed)))["matched_as"] == "uuid"

    job = admin.ok("GET", f"/admin/jobs/{answer.id}")
    assert job["id"] == f"job_{hexed}" and job["status"] == "succeeded"
    assert job["tenant"] == {"id": tenant["id"], "name": tenant["name"], "plan": "standard"}
    assert job["kind"] == "realtime" and job["slo"]["plan"] == "standard"
    assert job["tokens"]["completion"] == answer.usage.completion_tokens
    assert job["tokens"]["prompt"] == answer.usage.prompt_tokens
    assert job["worker_id"] and job["attempt"] >= 1 and job["finish_reason"] == "length"
    types = [s["type"] for s in job["steps"]]
    assert types[0] == "created" and types[-1] == "finished" and "first_token" in types
    assert all(s["at"].endswith("Z") and len(s["at"]) == 24 for s in job["steps"])
    took = job["durations"]
    assert 0 <= took["ttft_ms"] <= took["total_ms"]
    # Each phase is rounded to the millisecond on its own.
    assert abs(sum(p["ms"] for p in job["phases"]) - took["total_ms"]) <= len(job["phases"])
    assert job["verdict"].startswith("First token after")


def test_a_slow_job_says_where_its_time_went(sim_stack: Stack, admin: Admin,
                                             tenant: dict[str, str]):
    job_id = slow_job(sim_stack.database_url, tenant["id"], queue_ms=1800, preempted=True)
    job = admin.ok("GET", f"/admin/jobs/job_{job_id.hex}")
    assert [s["type"] for s in job["steps"]] == [
        "created", "first_token", "preempted", "assigned", "started", "resumed", "finished"]
    assert [s["worker"] for s in job["steps"]][2:] == [WORKER] * 5
    assert [(p["phase"], p["ms"]) for p in job["phases"]] == [
        ("queued", 1880), ("decode", 50), ("parked", 500), ("placed", 20), ("prefill", 40),
        ("decode", 200)]
    assert job["durations"] == {"queue_ms": 1880, "ttft_ms": 1880, "tpot_ms": 40,
                                "total_ms": 2690, "parked_ms": 500}
    assert job["slo"] == {"plan": "standard", "ttft_slo_ms": 1000, "tpot_slo_ms": 100,
                          "predicted_ttft_ms": 400}
    assert job["tokens"] == {"prompt": 12, "completion": 21, "cached": 4}
    assert job["attempt"] == 2 and job["preemption"]["preemptions"] == 1
    assert job["verdict"] == (
        "First token after 1,880 ms against a 1,000 ms target (missed). Most of its 2,690 ms "
        "was waiting in the queue: 1,880 ms (69%). Preempted 1 time.")


def test_a_batch_its_lines_and_files(sim_stack: Stack, admin: Admin, tenant: dict[str, str]):
    batch_id, (a, b, c) = finished_batch(sim_stack.database_url, tenant["id"])
    public = f"batch_{batch_id.hex}"
    for q in (public, str(batch_id)):
        assert _found(admin, q)["kind"] == "batch"
    line = _found(admin, "b", batch=public)
    assert (line["kind"], line["id"], line["matched_as"]) == ("job", f"job_{b.hex}",
                                                              "custom_id")
    assert _found(admin, f"batch_req_{c.hex}")["id"] == f"job_{c.hex}"
    assert _found(admin, f"req_{a.hex}")["matched_as"] == "request_id"

    detail = admin.ok("GET", f"/admin/batches/{public}")
    assert detail["id"] == public and detail["tenant"]["name"] == tenant["name"]
    (infile,) = detail["files"]
    assert infile["role"] == "input" and infile["bytes"] == 1234 and infile["lines"] == 3
    assert _found(admin, infile["id"]) | {"query": None} == {
        "object": "search_result", "query": None, "kind": "batch", "id": public,
        "matched_as": "file_id", "url": f"/admin/batches/{public}"}
    assert detail["lines_by_status"]["succeeded"] == 2
    assert detail["lines_by_status"]["failed"] == 1 and detail["lines_by_status"]["invalid"] == 0
    assert [x["custom_id"] for x in detail["slowest_lines"]] == ["b", "a", "c"]
    assert detail["slowest_lines"][0]["job_id"] == f"job_{b.hex}"
    assert detail["slowest_lines"][0]["run_ms"] == 640
    (failed,) = detail["failed_lines"]
    assert failed == {"job_id": f"job_{c.hex}", "custom_id": "c", "line_no": 3,
                      "code": "engine_error", "message": "it broke"}
    line_job = admin.ok("GET", f"/admin/jobs/job_{b.hex}")
    assert line_job["batch"] == {"id": public, "custom_id": "b", "line_no": 2}


def test_a_real_batchs_output_request_id_leads_to_its_line(sim_stack: Stack, admin: Admin,
                                                           tenant: dict[str, str]):
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=tenant["key"])
    lines = "\n".join(json.dumps({
        "custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": MODEL, "max_tokens": 3,
                 "messages": [{"role": "user", "content": "hi"}]}}) for i in range(2))
    f = api.files.create(file=("in.jsonl", io.BytesIO(lines.encode())), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    deadline = time.monotonic() + 90
    while batch.status != "completed" and time.monotonic() < deadline:
        time.sleep(0.5)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.output_file_id
    out = [json.loads(x) for x in api.files.content(batch.output_file_id).text.splitlines()]
    request_id = next(x for x in out if x["custom_id"] == "r1")["response"]["request_id"]
    found = _found(admin, request_id)
    assert found["kind"] == "job" and found["matched_as"] == "request_id"
    job = admin.ok("GET", found["url"])
    assert job["batch"]["id"] == batch.id and job["batch"]["custom_id"] == "r1"
    detail = admin.ok("GET", f"/admin/batches/{batch.id}")
    assert {x["role"] for x in detail["files"]} == {"input", "output"}
    assert detail["lines_by_status"]["succeeded"] == 2
    assert _found(admin, f.id)["id"] == batch.id


@pytest.mark.parametrize("path", [
    "/admin/search?q=job_0123", "/admin/search?q=nothing-like-an-id",
    f"/admin/search?q=r0&batch=batch_{uuid.uuid4().hex}", f"/admin/jobs/job_{uuid.uuid4().hex}",
    f"/admin/batches/batch_{uuid.uuid4().hex}", "/admin/jobs/batch_" + "0" * 32,
    f"/admin/search?q={uuid.uuid4()}"])
def test_an_unknown_id_is_a_404_in_openais_shape(admin: Admin, path: str):
    resp = admin.http.get(path)
    assert resp.status_code == 404, resp.text
    error = resp.json()["error"]
    assert error["code"] == "not_found" and error["type"] == "not_found_error"
    assert error["param"] in ("q", "job_id", "batch_id") and "matches" in error["message"]


def test_a_realtime_requests_x_request_id_leads_to_its_job(sim_stack: Stack, admin: Admin,
                                                           tenant: dict[str, str]):
    """The id a client saw on its answer (ours, or its own X-Request-Id when sane) finds the
    job the request created."""
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=tenant["key"])
    messages = [{"role": "user", "content": "which job was I?"}]
    raw = api.chat.completions.with_raw_response.create(model=MODEL, max_tokens=3,
                                                        messages=messages)
    ours, job = raw.headers["x-request-id"], "job_" + raw.parse().id.removeprefix("chatcmpl-")
    assert ours.startswith("req_") and ours.removeprefix("req_") != job.removeprefix("job_")
    found = _found(admin, ours)
    assert (found["id"], found["matched_as"]) == (job, "request_id")
    own = f"trace-{uuid.uuid4().hex[:12]}"
    answer = api.chat.completions.create(model=MODEL, max_tokens=3, messages=messages,
                                         extra_headers={"X-Request-Id": own})
    found = _found(admin, own)
    assert found["id"] == "job_" + answer.id.removeprefix("chatcmpl-")


def test_an_unknown_request_id_says_where_to_find_its_job(admin: Admin):
    request_id = f"req_{uuid.uuid4().hex}"
    resp = admin.http.get("/admin/search", params={"q": request_id})
    assert resp.status_code == 404
    assert f"fairway logs --request-id {request_id}" in resp.json()["error"]["message"]


def test_an_empty_or_huge_query_is_a_400(admin: Admin):
    for q in ("", "x" * 300):
        resp = admin.http.get("/admin/search", params={"q": q})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "q", resp.text


@pytest.mark.parametrize("path", ["/admin/search?q=x", f"/admin/jobs/job_{uuid.uuid4().hex}",
                                  f"/admin/batches/batch_{uuid.uuid4().hex}"])
def test_the_admin_credential_is_required(sim_stack: Stack, tenant: dict[str, str], path: str):
    anonymous = httpx.get(sim_stack.base_url + path, timeout=10)
    assert anonymous.status_code == 401 and "error" in anonymous.json()
    as_tenant = httpx.get(sim_stack.base_url + path, timeout=10,
                          headers={"Authorization": f"Bearer {tenant['key']}"})
    assert as_tenant.status_code in (401, 403) and "error" in as_tenant.json()
