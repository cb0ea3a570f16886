"""An admin registers a tenant's adapter by URL through the API and the CLI, against the
shared sim stack and a local HTTP server: the adapter is the tenant's and usable at once, the
audit keeps the URL without its query, and bad URLs are 400s in OpenAI's error shape."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
from sqlalchemy import select

from service.cli.main import main
from service.store.db import sync_session
from service.store.models.audit import AuditEntry
from service.store.models.tenants import Tenant
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import Admin
from tests.support.lora_adapter import adapter_zip
from tests.support.stack import Stack

MODEL = "sim-model"
ARCHIVE = adapter_zip()


@pytest.fixture(scope="module")
def archive_url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.startswith("/adapter.zip"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(ARCHIVE)))
            self.end_headers()
            self.wfile.write(ARCHIVE)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_an_admin_registers_an_archive_by_url(
        sim_stack: Stack, make_tenant: Callable[[str], tuple[uuid.UUID, str]],
        database_url: str, archive_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    tenant_id, key = make_tenant("lora-url")
    admin = Admin(sim_stack.base_url)
    path = f"/admin/tenants/{tenant_id}/adapters"
    made = admin.http.post(path, json={"name": "by-url", "model": MODEL,
                                       "url": archive_url + "/adapter.zip?sig=secret"})
    assert made.status_code == 201, made.text
    name = made.json()["model"]
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=60)
    answer = api.chat.completions.create(model=name, max_tokens=4,
                                         messages=[{"role": "user", "content": "hi"}],
                                         extra_body={"ignore_eos": True})
    assert answer.model == name
    with sync_session(database_url) as session:
        audit = session.scalar(select(AuditEntry).where(
            AuditEntry.action == "adapter.register", AuditEntry.target_id == str(tenant_id)))
        assert audit is not None
        assert audit.details["url"] == archive_url + "/adapter.zip"  # no query: no signature

    refusals = [
        ({"url": "s3://bucket/adapter.zip"}, "invalid_value", "url"),
        ({"url": "file:///etc/passwd"}, "invalid_value", "url"),
        ({"url": archive_url + "/missing.zip"}, "invalid_adapter", "url"),
        ({"url": archive_url + "/adapter.zip", "path": "x"}, "invalid_value", "url"),
        ({}, "invalid_value", "path"),
    ]
    for source, code, param in refusals:
        resp = admin.http.post(path, json={"name": f"no-{uuid.uuid4().hex[:6]}",
                                           "model": MODEL, **source})
        error = resp.json()["error"]
        assert resp.status_code == 400 and (error["code"], error["param"]) == (code, param), (
            source, resp.text)

    with sync_session(database_url) as session:
        tenant = session.scalar(select(Tenant.name).where(Tenant.id == tenant_id))
    assert main(["--base-url", sim_stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN,
                 "adapter", "register", "--url", archive_url + "/adapter.zip",
                 "--tenant", str(tenant), "--name", "via-cli-url", "--model", MODEL]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "via-cli-url"
    as_tenant = httpx.post(sim_stack.base_url + path, headers={"Authorization": f"Bearer {key}"},
                           json={"name": "x", "model": MODEL, "url": archive_url}, timeout=30)
    assert as_tenant.status_code == 403
