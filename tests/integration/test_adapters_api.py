"""Tenants' LoRA adapters against the shared sim stack: upload, list, retrieve and delete
through the API and the CLI; the adapter's ft: name as `model` in realtime and background
requests; GET /v1/models for its owner only; another tenant can neither see nor use it;
bad uploads get OpenAI's error shape; a burst for a cold adapter loads it once."""

from __future__ import annotations

import concurrent.futures
import io
import json
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from service.cli.main import main
from service.store.db import sync_session
from service.store.models.adapters import LoraAdapter
from service.store.models.audit import AuditEntry
from service.store.models.jobs import Job
from service.store.models.tenants import Tenant
from service.store.settings import DEV_ADMIN_TOKEN
from tests.integration._scrape import scheduler_url, scrape, total, worker_url
from tests.support.admin import Admin
from tests.support.lora_adapter import adapter_config, adapter_zip, synthetic_weights
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=60)


def upload(stack: Stack, key: str, name: str, data: bytes | None = None,
           model: str = MODEL) -> httpx.Response:
    return httpx.post(stack.base_url + "/v1/adapters", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      data={"name": name, "model": model},
                      files={"file": ("adapter.zip", adapter_zip() if data is None else data)})


def call(stack: Stack, key: str, method: str, path: str) -> httpx.Response:
    return httpx.request(method, stack.base_url + path, timeout=30,
                         headers={"Authorization": f"Bearer {key}"})


# The sim engine ends a sequence at random (its EOS chance); an adapter's random id must not
# make an answer empty by chance.
NO_EOS = {"ignore_eos": True}


def chat(api: openai.OpenAI, model: str, content: str = "hello adapter") -> Any:
    return api.chat.completions.create(model=model, max_tokens=10, temperature=0,
                                       messages=[{"role": "user", "content": content}],
                                       extra_body=NO_EOS)


def test_an_adapter_is_its_tenants_alone(sim_stack: Stack, make_tenant, database_url):
    owner_id, owner = make_tenant("lora")
    _, other = make_tenant("lora-other")
    resp = upload(sim_stack, owner, "support-v2")
    assert resp.status_code == 200, resp.text
    adapter = resp.json()
    name = adapter["model"]
    assert name.startswith(f"ft:{MODEL}:lora-") and name.endswith(":support-v2")
    assert (adapter["object"], adapter["rank"], adapter["target_modules"]) == (
        "lora_adapter", 8, ["q_proj", "v_proj"])

    assert [a["id"] for a in call(sim_stack, owner, "GET", "/v1/adapters").json()["data"]] == [
        adapter["id"]]
    for ref in (adapter["id"], name):
        assert call(sim_stack, owner, "GET", f"/v1/adapters/{ref}").json()["id"] == adapter["id"]
    api = client(sim_stack, owner)
    assert name in [m.id for m in api.models.list().data]
    assert api.models.retrieve(name).owned_by == name.split(":")[2]

    # Another tenant: nothing to see, nothing to use, nothing to delete.
    stranger = client(sim_stack, other)
    assert call(sim_stack, other, "GET", "/v1/adapters").json()["data"] == []
    assert name not in [m.id for m in stranger.models.list().data]
    for method in ("GET", "DELETE"):
        for ref in (adapter["id"], name):
            refused = call(sim_stack, other, method, f"/v1/adapters/{ref}")
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    with pytest.raises(openai.NotFoundError) as info:
        chat(stranger, name)
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        stranger.models.retrieve(name)

    # The owner runs it: the answer names the adapter, the job runs on its base model, and the
    # output is not the base model's.
    tuned, base = chat(api, name), chat(api, MODEL)
    assert tuned.model == name and tuned.choices[0].message.content
    assert tuned.choices[0].message.content != base.choices[0].message.content
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(Job.id == uuid.UUID(tuned.id.split("-", 1)[1])))
        assert job is not None and job.model == MODEL and job.tenant_id == owner_id
        assert job.request["model"] == name

    # Streamed, and as a text completion.
    chunks = list(api.chat.completions.create(
        model=name, max_tokens=10, temperature=0, stream=True, extra_body=NO_EOS,
        messages=[{"role": "user", "content": "hello adapter"}]))
    assert {c.model for c in chunks} == {name}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        tuned.choices[0].message.content)
    text = api.completions.create(model=name, prompt="once upon", max_tokens=6, temperature=0,
                                  extra_body=NO_EOS)
    assert text.model == name and text.choices[0].text != api.completions.create(
        model=MODEL, prompt="once upon", max_tokens=6, temperature=0,
        extra_body=NO_EOS).choices[0].text

    # A background response with the adapter.
    created = api.responses.create(model=name, input="hello adapter", background=True,
                                   max_output_tokens=10, temperature=0, extra_body=NO_EOS)
    assert created.model == name
    ended = ("completed", "incomplete", "failed", "cancelled")
    wait_until(lambda: api.responses.retrieve(created.id).status in ended, 60,
               "the background response")
    done = api.responses.retrieve(created.id)
    assert done.status in ("completed", "incomplete"), done.error  # incomplete: max tokens
    assert done.output_text == tuned.choices[0].message.content

    gone = call(sim_stack, owner, "DELETE", f"/v1/adapters/{name}").json()
    assert gone == {"id": adapter["id"], "object": "lora_adapter", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        chat(api, name)
    assert name not in [m.id for m in api.models.list().data]
    with sync_session(database_url) as session:
        row = session.scalar(select(LoraAdapter).where(LoraAdapter.tenant_id == owner_id))
        assert row is not None and row.status == "deleted" and row.deleted_at is not None
    # The name is free again.
    assert upload(sim_stack, owner, "support-v2").status_code == 200


def test_bad_uploads_get_openais_error_shape(sim_stack: Stack, make_tenant):
    _, key = make_tenant("lora-bad")
    cases = [
        (upload(sim_stack, key, "big", adapter_zip(adapter_config(rank=64))), "invalid_adapter",
         "max_lora_rank"),
        (upload(sim_stack, key, "mods", adapter_zip(adapter_config(modules=("lm_head",)))),
         "invalid_adapter", "target_modules"),
        (upload(sim_stack, key, "junk", adapter_zip(weights=b"not safetensors")),
         "invalid_adapter", "does not parse"),
        (upload(sim_stack, key, "notzip", b"plain bytes"), "invalid_adapter", "zip or tar"),
        (upload(sim_stack, key, "Bad Name"), "invalid_value", "name must be"),
        (upload(sim_stack, key, "nobase", model="no-such-model"), "invalid_value",
         "base model served here"),
    ]
    for resp, code, text in cases:
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["code"] == code and text in error["message"], error
        assert error["type"] == "invalid_request_error"
    # Past the API's general body limit (1 MB): adapters have their own.
    big = adapter_zip(weights=synthetic_weights(layers=16, hidden=1024))
    assert len(big) > 1_000_000
    assert upload(sim_stack, key, "big-but-fine", big).status_code == 200
    assert upload(sim_stack, key, "twice").status_code == 200
    again = upload(sim_stack, key, "twice")
    assert again.status_code == 409 and again.json()["error"]["code"] == "adapter_exists"
    listed = call(sim_stack, key, "GET", "/v1/adapters").json()["data"]
    assert [a["name"] for a in listed] == ["big-but-fine", "twice"]


def test_a_burst_for_a_cold_adapter_loads_it_once(sim_stack: Stack, make_tenant):
    _, key = make_tenant("lora-burst")
    name = upload(sim_stack, key, "burst").json()["model"]
    url = worker_url(sim_stack, "sim-1")
    before = total(scrape(url), "fairway_lora_load_seconds_count")
    api = client(sim_stack, key)
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: chat(api, name, "the same question"), range(20)))
    assert len({a.choices[0].message.content for a in answers}) == 1
    assert total(scrape(url), "fairway_lora_load_seconds_count") - before == 1
    # The worker's beat names it warm, by the name the dispatcher places its jobs by.
    wait_until(lambda: name in worker_beat(sim_stack, "sim-1").get("adapters", []), 10,
               "the worker's beat names the adapter warm", sim_stack)
    beat = worker_beat(sim_stack, "sim-1")
    assert beat["max_loras"] >= 1 and beat["max_cpu_loras"] >= beat["max_loras"]


def worker_beat(stack: Stack, worker_id: str) -> dict[str, Any]:
    from redis import Redis

    from service.store.keys import worker_key

    raw = Redis.from_url(stack.redis_url).get(worker_key(worker_id))
    return dict(json.loads(raw)) if raw else {}


def test_the_cli_uploads_lists_and_deletes(sim_stack: Stack, make_tenant, tmp_path, capsys):
    _, key = make_tenant("lora-cli")
    folder = tmp_path / "my-adapter"
    folder.mkdir()
    with zipfile.ZipFile(io.BytesIO(adapter_zip())) as zf:
        zf.extractall(folder)
    base = ["--base-url", sim_stack.base_url + "/v1", "--api-key", key, "adapter"]
    assert main([*base, "upload", str(folder), "--name", "cli-one", "--model", MODEL]) == 0
    uploaded = json.loads(capsys.readouterr().out)
    assert uploaded["name"] == "cli-one"
    assert main([*base, "list"]) == 0
    assert uploaded["model"] in capsys.readouterr().out
    assert main([*base, "delete", uploaded["model"]]) == 0
    assert uploaded["id"] in capsys.readouterr().out
    assert main([*base, "list"]) == 0
    assert "No adapters" in capsys.readouterr().out


def test_batch_lines_may_name_the_adapter(sim_stack: Stack, make_tenant, database_url):
    tenant_id, key = make_tenant("lora-batch")
    _, other = make_tenant("lora-batch-other")
    name = upload(sim_stack, key, "batchy").json()["model"]
    api = client(sim_stack, key)
    realtime = chat(api, name, "batch me").choices[0].message.content

    def submit(who: openai.OpenAI) -> Any:
        line = {"custom_id": "one", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": name, "max_tokens": 10, "temperature": 0, **NO_EOS,
                         "messages": [{"role": "user", "content": "batch me"}]}}
        f = who.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")),
                             purpose="batch")
        return who.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")

    ended = ("completed", "failed", "expired", "cancelled")
    batch = submit(api)
    wait_until(lambda: api.batches.retrieve(batch.id).status in ended, 60, "the batch")
    batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch.errors
    assert batch.output_file_id is not None
    out = json.loads(api.files.content(batch.output_file_id).text.splitlines()[0])
    assert out["response"]["body"]["choices"][0]["message"]["content"] == realtime
    with sync_session(database_url) as session:
        models = set(session.scalars(select(Job.model).where(Job.tenant_id == tenant_id)))
    assert models == {MODEL}  # the jobs ran on the base model's workers

    # Another tenant's batch naming it fails as an unknown model.
    refused = submit(client(sim_stack, other))
    stranger = client(sim_stack, other)
    wait_until(lambda: stranger.batches.retrieve(refused.id).status in ended, 60, "the batch")
    failed = stranger.batches.retrieve(refused.id)
    assert failed.status == "failed" and failed.errors is not None
    assert failed.errors.data[0].code == "model_not_found"


def test_adapter_requests_count_for_their_tenant(sim_stack: Stack, make_tenant, database_url):
    tenant_id, key = make_tenant("lora-usage")
    name = upload(sim_stack, key, "counted").json()["model"]
    api = client(sim_stack, key)
    answers = [chat(api, name, f"count me {i}") for i in range(3)]
    tokens = sum(a.usage.prompt_tokens + a.usage.completion_tokens for a in answers)
    base = chat(api, MODEL, "the base model, same window")
    base_tokens = base.usage.prompt_tokens + base.usage.completion_tokens
    since = int(time.time()) - 3600

    def usage() -> dict[str, tuple[int, int]]:
        resp = httpx.get(sim_stack.base_url + "/v1/organization/usage/completions", timeout=30,
                         headers={"Authorization": f"Bearer {key}"},
                         params={"start_time": since, "bucket_width": "1h",
                                 "group_by": "model"})
        assert resp.status_code == 200, resp.text
        out: dict[str, tuple[int, int]] = {}
        for r in (r for b in resp.json()["data"] for r in b["results"]):
            requests, used = out.get(r["model"], (0, 0))
            out[r["model"]] = (requests + r["num_model_requests"],
                               used + r["input_tokens"] + r["output_tokens"])
        return out

    # Usage: the adapter's requests under its ft: name (as OpenAI shows a fine-tune), the
    # base model's request of the same window under the base model.
    wait_until(lambda: sum(n for n, _ in usage().values()) == 4, 30, "the usage")
    assert usage() == {name: (3, tokens), MODEL: (1, base_tokens)}
    # Fair share: the dispatcher charged the tenant for them.
    with sync_session(database_url) as session:
        tenant = session.scalar(select(Tenant.name).where(Tenant.id == tenant_id))
    wait_until(lambda: total(scrape(scheduler_url(sim_stack)), "fairway_fair_share_counter",
                             tenant=str(tenant)) > 0, 10, "the tenant's fair-share counter")


def test_an_admin_registers_a_folder_under_the_import_dir(sim_stack: Stack, make_tenant,
                                                          database_url, capsys):
    tenant_id, key = make_tenant("lora-admin")
    imports = Path(sim_stack.env_overrides["FAIRWAY_ADAPTER_IMPORT_DIR"])
    folder = imports / f"acme-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(adapter_zip())) as zf:
        zf.extractall(folder)
    admin = Admin(sim_stack.base_url)
    path = f"/admin/tenants/{tenant_id}/adapters"
    made = admin.http.post(path, json={"name": "from-disk", "model": MODEL,
                                       "path": folder.name})
    assert made.status_code == 201, made.text
    name = made.json()["model"]
    assert chat(client(sim_stack, key), name).model == name  # the tenant's, usable at once
    with sync_session(database_url) as session:
        audit = session.scalar(select(AuditEntry).where(
            AuditEntry.action == "adapter.register", AuditEntry.target_id == str(tenant_id)))
        assert audit is not None and audit.actor == "admin:pytest"
    (folder / "adapter_model.safetensors").write_bytes(b"torn")
    refusals = {
        "../": "invalid_value", folder.name + "/../..": "invalid_value",
        "no-such-folder": "invalid_value", folder.name: "invalid_adapter"}
    for where, code in refusals.items():
        resp = admin.http.post(path, json={"name": "again", "model": MODEL, "path": where})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == code, (where, resp.text)
    # The CLI's way (the admin credential, the tenant by name).
    with sync_session(database_url) as session:
        tenant = session.scalar(select(Tenant.name).where(Tenant.id == tenant_id))
    other = imports / f"cli-{uuid.uuid4().hex[:6]}"
    other.mkdir()
    with zipfile.ZipFile(io.BytesIO(adapter_zip())) as zf:
        zf.extractall(other)
    assert main(["--base-url", sim_stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN,
                 "adapter", "register", other.name, "--tenant", str(tenant),
                 "--name", "via-cli", "--model", MODEL]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "via-cli"
    # Only the admin: a tenant key is refused.
    as_tenant = httpx.post(sim_stack.base_url + path, headers={"Authorization": f"Bearer {key}"},
                           json={"name": "x", "model": MODEL, "path": folder.name}, timeout=30)
    assert as_tenant.status_code == 403
