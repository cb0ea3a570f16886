"""Usage and spend by model with tenants' adapters, against the shared sim stack: a request, a
background response and a batch line that name an adapter are stored with its ft: name in
``adapter_model`` and count under that name (the usage API grouped by model or filtered by
``models``, the admin's spend by model), while a base-model request of the same window counts
under the base model."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import openai
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from tests.support.admin import Admin
from tests.support.lora_adapter import adapter_zip
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"
ENDED = ("completed", "incomplete", "failed", "cancelled", "expired")


def _adapter(stack: Stack, key: str, name: str) -> str:
    resp = httpx.post(stack.base_url + "/v1/adapters", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      data={"name": name, "model": MODEL},
                      files={"file": ("adapter.zip", adapter_zip())})
    assert resp.status_code == 200, resp.text
    model: str = resp.json()["model"]
    return model


def _batch(api: openai.OpenAI, model: str) -> None:
    line = {"custom_id": "one", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "max_tokens": 4,
                     "messages": [{"role": "user", "content": "batch me"}]}}
    f = api.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")),
                         purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    wait_until(lambda: api.batches.retrieve(batch.id).status in ENDED, 60, "the batch")
    assert api.batches.retrieve(batch.id).status == "completed"


def _usage(stack: Stack, key: str, since: int, **params: Any) -> dict[tuple[Any, ...], int]:
    """Requests per (model, batch) over the range."""
    resp = httpx.get(stack.base_url + "/v1/organization/usage/completions", timeout=30,
                     headers={"Authorization": f"Bearer {key}"},
                     params={"start_time": since, "bucket_width": "1h",
                             "group_by": "model,batch", **params})
    assert resp.status_code == 200, resp.text
    out: dict[tuple[Any, ...], int] = {}
    for r in (r for b in resp.json()["data"] for r in b["results"]):
        group = (r["model"], r["batch"])
        out[group] = out.get(group, 0) + r["num_model_requests"]
    return out


def test_adapter_jobs_count_under_the_adapter(sim_stack: Stack, make_tenant: Any,
                                              database_url: str) -> None:
    tenant_id, key = make_tenant("lora-usage-by-model")
    name = _adapter(sim_stack, key, "by-model")
    since = int(time.time()) - 60
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=60)
    for model in (name, MODEL):
        api.chat.completions.create(model=model, max_tokens=4,
                                    messages=[{"role": "user", "content": "hi"}])
    made = api.responses.create(model=name, input="hi", background=True, max_output_tokens=4)
    wait_until(lambda: api.responses.retrieve(made.id).status in ENDED, 60, "the response")
    _batch(api, name)

    with sync_session(database_url) as session:
        stored = session.execute(select(Job.endpoint, Job.kind, Job.model, Job.adapter_model)
                                 .where(Job.tenant_id == tenant_id)).tuples().all()
    # A background response is offline work: a batch-class job.
    assert sorted(stored, key=str) == sorted([
        ("chat.completions", "realtime", MODEL, name), ("chat.completions", "realtime", MODEL,
                                                        None),
        ("responses", "batch", MODEL, name), ("chat.completions", "batch", MODEL, name),
    ], key=str)

    expected = {(name, False): 1, (name, True): 2, (MODEL, False): 1}
    wait_until(lambda: _usage(sim_stack, key, since) == expected, 30, "the usage by model")
    # The models filter reads the same names: the adapter's alone, or the base model's alone.
    assert _usage(sim_stack, key, since, models=name) == {(name, False): 1, (name, True): 2}
    assert _usage(sim_stack, key, since, models=MODEL) == {(MODEL, False): 1}

    # Spend by model: the adapter's line beside the base model's (priced as the base model).
    spend = Admin(sim_stack.base_url).ok("GET", "/admin/spend", params={
        "tenant_id": str(tenant_id), "group_by": "model"})
    assert {r["model"]: r["requests"] for r in spend["data"]} == {name: 3, MODEL: 1}
