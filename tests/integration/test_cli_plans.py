"""`fairway plan list` and `fairway plan set` against a running stack: a plan's admission mode,
wait budget and targets change through the admin API, and only the fields given change."""

from __future__ import annotations

import uuid

import pytest

from service.cli.main import main
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import NO_LIMITS, Admin
from tests.support.stack import Stack


def fairway(stack: Stack, *args: str) -> int:
    return main(["--base-url", stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN, *args])


def test_plan_set_changes_only_what_it_is_given(sim_stack: Stack, capsys):
    admin = Admin(sim_stack.base_url)
    name = f"cli{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/tiers/{name}", json={
        "weight": 2, "allowed_service_tiers": ["auto", "default", "flex"], "ttft_slo_ms": 800,
        "tpot_slo_ms": 90, "quotas": {**NO_LIMITS, "concurrent_requests": 7}})

    assert fairway(sim_stack, "plan", "set", name, "--admission-mode", "shed",
                   "--ttft-slo-ms", "1500") == 0
    assert "admission shed" in capsys.readouterr().out
    plan = next(p for p in admin.ok("GET", "/admin/tiers")["data"] if p["name"] == name)
    assert (plan["admission_mode"], plan["ttft_slo_ms"]) == ("shed", 1500)
    assert (plan["weight"], plan["tpot_slo_ms"], plan["max_queue_wait_ms"]) == (2, 90, 30_000)
    assert plan["allowed_service_tiers"] == ["auto", "default", "flex"]
    assert plan["quotas"]["concurrent_requests"] == 7

    assert fairway(sim_stack, "plan", "set", name, "--admission-mode", "queue",
                   "--max-queue-wait-ms", "5000", "--over-quota", "overflow") == 0
    assert fairway(sim_stack, "plan", "list") == 0
    listed = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith(name + " "))
    assert "queue (wait <= 5 s)" in listed and "1500 ms" in listed and "overflow" in listed


@pytest.mark.parametrize("args, says", [
    (["plan", "set", "no-such-plan", "--weight", "2"], "no plan named 'no-such-plan'"),
    (["plan", "set", "standard"], "nothing to change"),
])
def test_plan_set_errors_are_one_line(sim_stack: Stack, capsys, args: list[str], says: str):
    assert fairway(sim_stack, *args) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
