"""Webhook URLs on private, loopback and link-local addresses are refused at registration
(400 in OpenAI's shape, `param` "url"), on a stack that does not allow private targets (the
shared test stacks do: their receivers listen on 127.0.0.1)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.admin import Admin
from tests.support.stack import Stack, own_stack


@pytest.fixture(scope="module")
def strict_stack() -> Iterator[Stack]:
    with own_stack("whtargets", {"FAIRWAY_SERVED_MODEL_NAME": "sim-model"}) as stack:
        yield stack


@pytest.mark.parametrize("url", ["http://10.0.0.1/x", "http://127.0.0.1:8000/hooks",
                                 "http://169.254.169.254/latest/meta-data", "http://[::1]/x",
                                 "http://localhost:9000/x"])
def test_private_targets_are_refused(strict_stack: Stack, url: str):
    admin = Admin(strict_stack.base_url)
    tid, _ = admin.create_tenant(f"wt-{uuid.uuid4().hex[:8]}")
    path = f"/admin/tenants/{tid}/webhooks"
    r = admin.http.post(path, json={"url": url, "event_types": ["batch.completed"]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "url" and error["type"] == "invalid_request_error"
    assert "FAIRWAY_WEBHOOK_ALLOW_PRIVATE" in error["message"]
    assert admin.ok("GET", path)["data"] == []
    # Nor can an accepted endpoint be moved inside.
    made = admin.ok("POST", path, json={"url": "https://example.test/hook",
                                        "event_types": ["batch.completed"]})
    r = admin.http.patch(f"{path}/{made['id']}", json={"url": url})
    assert r.status_code == 400 and r.json()["error"]["param"] == "url", r.text
    assert admin.ok("GET", f"{path}/{made['id']}")["url"] == "https://example.test/hook"
