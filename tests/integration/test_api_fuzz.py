"""Schemathesis fuzzes every operation in the OpenAPI document against a running sim stack.

Each operation gets generated requests, valid and invalid (schemathesis's examples, coverage
and fuzzing phases, positive and negative data), and every response must be no server error,
with a status code, content type and headers the document lists for the operation, and a body
matching the documented schema. Generation is deterministic (a fixed seed, no example
database), so a failure in CI reproduces locally with the same command.

Generated values rarely name anything that exists, so hooks swap some of them (a fixed share,
drawn by Hypothesis, hence reproducible) for real ones: the served model, an uploaded file, a
batch, a job, a tenant, a key and a plan. That is what takes the fuzzer past the 404s into
the code that runs jobs, validates batches and writes admin changes.

Run it alone: ``python -m pytest -q tests/integration/test_api_fuzz.py``; ``-k`` with a
method or path (``-k "PUT and tiers"``) narrows it to some operations. FUZZ_EXAMPLES and
FUZZ_SEED fuzz deeper or differently for a local hunt; CI runs the defaults below.

Checks left out, and why: negative_data_rejection (the /v1 bodies ignore unknown fields, as
OpenAI and vLLM do, so a body with an extra property is rightly accepted);
positive_data_acceptance (a request valid by the schema is still refused for an unknown model,
a quota, a missing object); the stateful checks and phase (the document declares no links,
and the hooks above already reach real objects); ignored_auth (the credential is a bearer
token checked in code, not an OpenAPI security scheme); max_response_time. No operation is
left out: completions fail fast instead of blocking (FUZZ_ENV). The admin dashboard's files
(/admin/ui) are not in the document, so not fuzzed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import strategies as st

from service.api.app import create_app
from service.store.settings import DEV_ADMIN_TOKEN, EngineSettings, Settings
from tests.conftest import SIM_ENV
from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack, own_stack

MODEL = "sim-model"
SEED = int(os.environ.get("FUZZ_SEED", "20240901"))
# Per operation, in the fuzzing phase; the examples and coverage phases add their own cases
# (boundary values of every documented constraint), about 1,700 requests in all.
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance")

FUZZ_ENV = {
    **SIM_ENV,
    # A request that names the served model really runs, on the sim engine: fast steps, and a
    # short wait for the result, keep every call brief (a request that outlives the wait is
    # a documented 504). Nothing is excluded for blocking.
    "FAIRWAY_SIM_SPEED": "50",
    "FAIRWAY_REQUEST_TIMEOUT_SECONDS": "10",
    "FAIRWAY_LOG_LEVEL": "WARNING",
}

# Real values the hooks draw from, filled in by the `real` fixture before the first request;
# a DELETE gets resources of its own (DOOMED), so the other operations keep theirs.
REAL: dict[str, str] = {}
DOOMED: dict[str, str] = {}
BODY_FIELDS = ("model", "input_file_id", "completion_window", "endpoint", "tier")
PATH_FIELDS = ("job_id", "response_id", "file_id", "batch_id", "tenant_id", "key_id", "name",
               "webhook_id")


def _document() -> dict[str, Any]:
    """The OpenAPI document the API serves, built as the API builds it (no I/O), so that the
    operations are known at collection: each one is its own test."""
    return create_app(Settings(database_url="postgresql://unused", redis_url="redis://unused",
                               engine=EngineSettings(kind="sim", served_model_name=MODEL))
                      ).openapi()


CONFIG = schemathesis.Config.from_dict({
    "seed": SEED,
    "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none",
                   "no-shrink": True},
    "phases": {"stateful": {"enabled": False}},
    "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
    "request-timeout": 30,
})
schema = schemathesis.openapi.from_dict(_document(), config=CONFIG)


def _some_real(generated: Any, fields: tuple[str, ...],
               real: dict[str, str]) -> st.SearchStrategy[Any]:
    """`generated` with each field we have a real value for swapped in 3 times out of 4."""
    if not isinstance(generated, dict):
        return st.just(generated)
    names = [f for f in fields if f in generated and f in real]
    if not names:
        return st.just(generated)
    swaps = st.lists(st.integers(0, 3), min_size=len(names), max_size=len(names))
    return swaps.map(lambda draws: {**generated, **{
        f: real[f] for f, draw in zip(names, draws, strict=True) if draw}})


@schema.hook
def flatmap_body(_: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    return _some_real(body, BODY_FIELDS, REAL)


@schema.hook
def flatmap_path_parameters(ctx: schemathesis.HookContext,
                            path_parameters: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    deleting = ctx.operation is not None and ctx.operation.method.upper() == "DELETE"
    return _some_real(path_parameters, PATH_FIELDS, {**REAL, **DOOMED} if deleting else REAL)


@pytest.fixture(scope="module")
def fuzz_stack() -> Iterator[Stack]:
    # Its own stack: fuzzing creates, changes and deletes tenants, plans, files and batches,
    # which the shared stack's tests should not see.
    with own_stack("fuzz", FUZZ_ENV, workers=("fuzz-1",)) as stack:
        yield stack


@pytest.fixture(scope="module")
def auth(fuzz_stack: Stack) -> dict[str, str]:
    """The Authorization header for tenant routes (a tenant of its own) and for /admin."""
    _, key = Admin(fuzz_stack.base_url).create_tenant("fuzz-tenant")
    return {"tenant": f"Bearer {key}", "admin": f"Bearer {DEV_ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def real(fuzz_stack: Stack, auth: dict[str, str]) -> None:
    """Creates the objects the hooks swap in (REAL, DOOMED)."""
    admin = Admin(fuzz_stack.base_url)
    tenant = httpx.Client(base_url=fuzz_stack.base_url, timeout=30,
                          headers={"Authorization": auth["tenant"]})
    chat = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat}

    def upload() -> str:
        resp = tenant.post("/v1/files", data={"purpose": "batch"},
                           files={"file": ("in.jsonl", json.dumps(line).encode())})
        assert resp.status_code == 200, resp.text
        return str(resp.json()["id"])

    def tenant_with_key(name: str) -> tuple[str, str]:
        tenant_id, _ = admin.create_tenant(f"{name}-{uuid.uuid4().hex[:6]}")
        return tenant_id, admin.ok("POST", f"/admin/tenants/{tenant_id}/keys", json={})["id"]

    job = tenant.post("/v1/chat/completions", json=chat)
    assert job.status_code == 200, job.text
    response = tenant.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                  "max_output_tokens": 4, "background": True})
    assert response.status_code == 200, response.text
    file_id = upload()
    batch = tenant.post("/v1/batches", json={"input_file_id": file_id, "completion_window": "24h",
                                             "endpoint": "/v1/chat/completions"})
    assert batch.status_code == 200, batch.text
    # The admin operations change tenants of their own, never the fuzzing one.
    victim, key = tenant_with_key("fuzz-victim")
    doomed, doomed_key = tenant_with_key("fuzz-doomed")
    plan = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 1000,
            "tpot_slo_ms": 100, "quotas": NO_LIMITS}
    for name in ("fuzz-tier", "fuzz-doomed"):
        admin.ok("PUT", f"/admin/tiers/{name}", json=plan)
    hook = {"url": "https://example.test/hook", "event_types": ["batch.completed"]}
    webhook = admin.ok("POST", f"/admin/tenants/{victim}/webhooks", json=hook)["id"]
    doomed_webhook = admin.ok("POST", f"/admin/tenants/{doomed}/webhooks", json=hook)["id"]
    REAL.update(model=MODEL, input_file_id=file_id, completion_window="24h",
                endpoint="/v1/chat/completions", tier="standard", job_id=job.json()["id"],
                response_id=response.json()["id"], file_id=file_id,
                batch_id=batch.json()["id"], tenant_id=victim, key_id=key,
                name="fuzz-tier", webhook_id=webhook)
    DOOMED.update(file_id=upload(), tenant_id=doomed, key_id=doomed_key, name="fuzz-doomed",
                  webhook_id=doomed_webhook)


def test_the_fuzzed_document_is_the_served_one(fuzz_stack: Stack) -> None:
    served = httpx.get(fuzz_stack.base_url + "/openapi.json", timeout=10).json()
    assert served == _document()


# The seed shows in every test id: test_api_fuzz[PUT /admin/tiers/{name}][20240901]. (It also
# keeps the operation in the id: under pytest 9.2, schemathesis 4.32's ids lose it unless the
# test has a parametrization of its own.)
@pytest.mark.parametrize("seed", [SEED])
@schema.parametrize()
@pytest.mark.usefixtures("real")
def test_api_fuzz(seed: int, case: schemathesis.Case, fuzz_stack: Stack,
                  auth: dict[str, str]) -> None:
    assert REAL and DOOMED, "the `real` fixture fills these before the first request"
    who = "admin" if case.operation.path.startswith("/admin/") else "tenant"
    case.call_and_validate(base_url=fuzz_stack.base_url, headers={"Authorization": auth[who]})
