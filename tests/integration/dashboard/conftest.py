"""Fixtures of the dashboard tests: a headless Chromium, a sim stack with one tenant's
traffic (the world), and a Session per test (tests/support/dashboard.py)."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.admin import Admin
from tests.support.dashboard import CHROMIUM, CHROMIUM_ARGS, Session, chat, sync_api
from tests.support.stack import Stack, wait_until


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("FAIRWAY_UI_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("dashboard-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def world(sim_stack: Stack) -> dict[str, Any]:
    """Light data: a tenant with two keys and some usage, and a second, idle one."""
    admin = Admin(sim_stack.base_url)
    name = f"ui-{uuid.uuid4().hex[:6]}"
    tid, key = admin.create_tenant(name)
    second = admin.ok("POST", f"/admin/tenants/{tid}/keys", json={"name": "reporting"})
    for k in (key, key, second["key"]):
        assert chat(sim_stack, k).status_code == 200
    idle_id, _ = admin.create_tenant(f"{name}-idle", "free")
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key)
    lines = "\n".join(json.dumps({
        "custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "sim-model", "max_tokens": 4,
                 "messages": [{"role": "user", "content": "hi"}]}}) for i in range(3))
    f = api.files.create(file=("in.jsonl", io.BytesIO(lines.encode())), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    # The daily view reads the rolled-up table once per load; a page opened before the upkeep
    # rolled the three requests up would show no usage, so the world is ready when they are in.
    wait_until(lambda: admin.ok("GET", f"/admin/usage/series?tenant_id={tid}&days=7")[
        "totals"]["requests"] >= 3, 60, "usage rolled up", sim_stack)
    return {"batch_id": batch.id, "admin": admin, "name": name, "id": tid, "key": key,
            "idle_id": idle_id, "idle_name": f"{name}-idle", "base": sim_stack.base_url}


@pytest.fixture
def session(browser: Any, world: dict[str, Any], artifacts: Path
            ) -> Iterator[Callable[..., Session]]:
    opened: list[Session] = []

    def open_session(width: int, **kw: Any) -> Session:
        s = Session(browser, world["base"], width, artifacts, **kw)
        opened.append(s)
        return s

    yield open_session
    for s in opened:
        s.close()
