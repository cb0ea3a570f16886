"""The operator's CLI against a running stack: `fairway tenant show|set|suspend|resume|delete`
and `fairway key create|list|set|revoke` change what the admin API says, print no secret but
the one shown at creation, and fail in one line, never with a traceback."""

from __future__ import annotations

import io
import re
import uuid

import openai
import pytest

from service.cli.main import main
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import Admin
from tests.support.stack import Stack

KEY = re.compile(r"fw-[A-Za-z0-9_-]{20,}")


def fairway(stack: Stack, *args: str) -> int:
    return main(["--base-url", stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN, *args])


def _tenant(admin: Admin) -> tuple[str, str, str]:
    name = f"op{uuid.uuid4().hex[:6]}"
    tenant_id, key = admin.create_tenant(name)
    return name, tenant_id, key


def test_tenant_set_changes_the_plan_and_only_the_quotas_given(sim_stack: Stack, capsys):
    admin = Admin(sim_stack.base_url)
    name, tenant_id, _ = _tenant(admin)
    admin.set_quotas(tenant_id, monthly_tokens=5000)
    assert fairway(sim_stack, "tenant", "set", name, "--plan", "premium", "--rpm", "90",
                   "--concurrency", "unlimited") == 0
    assert "plan premium" in capsys.readouterr().out
    quotas = admin.quotas(tenant_id)
    assert quotas["tier"] == "premium"
    assert quotas["overrides"] == {"monthly_tokens": 5000, "requests_per_minute": 90,
                                   "concurrent_requests": "unlimited"}
    assert fairway(sim_stack, "tenant", "set", name, "--rpm", "plan") == 0
    assert "requests_per_minute" not in admin.quotas(tenant_id)["overrides"]

    assert fairway(sim_stack, "tenant", "show", name) == 0
    shown = capsys.readouterr().out
    assert "plan: premium" in shown and "5,000" in shown and "override" in shown
    assert "this month: 0 tokens used of 5,000 (0%)" in shown


def test_suspend_and_resume_bind_the_tenants_keys(sim_stack: Stack, capsys):
    admin = Admin(sim_stack.base_url)
    name, _, key = _tenant(admin)
    client = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0)
    assert fairway(sim_stack, "tenant", "suspend", name) == 0
    assert "suspended" in capsys.readouterr().out
    with pytest.raises(openai.PermissionDeniedError):
        client.models.list()
    assert fairway(sim_stack, "tenant", "resume", name) == 0
    assert client.models.list().data


def test_delete_asks_for_the_name_unless_yes(sim_stack: Stack, capsys, monkeypatch):
    admin = Admin(sim_stack.base_url)
    name, _, _ = _tenant(admin)
    monkeypatch.setattr("sys.stdin", _Tty("not-it\n"))
    assert fairway(sim_stack, "tenant", "delete", name) != 0
    assert "does not match" in capsys.readouterr().err
    assert any(t["name"] == name for t in admin.ok("GET", "/admin/tenants")["data"])
    monkeypatch.setattr("sys.stdin", _Tty(name + "\n"))
    assert fairway(sim_stack, "tenant", "delete", name) == 0
    assert not any(t["name"] == name for t in admin.ok("GET", "/admin/tenants")["data"])

    other, _, _ = _tenant(admin)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal: --yes is needed
    assert fairway(sim_stack, "tenant", "delete", other) != 0
    assert "--yes" in capsys.readouterr().err
    assert fairway(sim_stack, "tenant", "delete", other, "--yes") == 0


def test_key_create_list_set_revoke(sim_stack: Stack, capsys):
    admin = Admin(sim_stack.base_url)
    name, tenant_id, _ = _tenant(admin)
    assert fairway(sim_stack, "key", "create", name, "--name", "ci", "--models",
                   "sim-model,other", "--expires", "30d", "--rpm", "5") == 0
    out = capsys.readouterr().out
    secret = KEY.search(out)
    assert secret is not None
    key = next(k for k in admin.ok("GET", f"/admin/tenants/{tenant_id}/keys")["data"]
               if k["name"] == "ci")
    assert key["allowed_models"] == ["sim-model", "other"]
    assert key["requests_per_minute"] == 5 and key["expires_at"]

    assert fairway(sim_stack, "key", "list", name) == 0
    listed = capsys.readouterr().out
    assert key["id"] in listed and key["prefix"] in listed and "rpm 5" in listed
    assert secret.group(0) not in listed  # never the secret

    assert fairway(sim_stack, "key", "set", key["id"], "--models", "all", "--rpm", "none",
                   "--concurrency", "2", "--expires", "never") == 0
    capsys.readouterr()
    key = admin.ok("GET", f"/admin/keys/{key['id']}")
    assert (key["allowed_models"], key["requests_per_minute"], key["concurrent_requests"],
            key["expires_at"]) == (None, None, 2, None)

    client = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=secret.group(0),
                           max_retries=0)
    assert client.models.list().data
    assert fairway(sim_stack, "key", "revoke", key["id"]) == 0
    assert "revoked" in capsys.readouterr().out
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


@pytest.mark.parametrize("args, says", [
    (["tenant", "show", "no-such-tenant"], "no tenant named 'no-such-tenant'"),
    (["tenant", "set", "standard-less"], "no tenant named"),
    (["key", "revoke", "not-a-key"], "No key with id 'not-a-key'"),
    (["key", "set", "00000000-0000-0000-0000-000000000000", "--rpm", "3"], "No key with id"),
])
def test_operator_errors_are_one_line(sim_stack: Stack, capsys, args: list[str], says: str):
    assert fairway(sim_stack, *args) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_nothing_to_change_and_a_key_limit_above_the_tenants(sim_stack: Stack, capsys):
    admin = Admin(sim_stack.base_url)
    name, tenant_id, _ = _tenant(admin)
    assert fairway(sim_stack, "tenant", "set", name) != 0
    assert "nothing to change" in capsys.readouterr().err
    admin.set_quotas(tenant_id, requests_per_minute=10)
    assert fairway(sim_stack, "key", "create", name, "--rpm", "11") != 0
    err = capsys.readouterr().err
    assert "above the tenant's own limit of 10" in err and "Traceback" not in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True
