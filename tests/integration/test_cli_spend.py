"""`fairway price`, `fairway spend` and `fairway budget` against the shared sim stack."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest

from service.cli.main import main
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import Admin
from tests.support.spend import ended_job
from tests.support.stack import Stack

M = 1_000_000


def fairway(stack: Stack, *args: str) -> int:
    return main(["--base-url", stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN, *args])


def test_price_set_and_list(sim_stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    model = f"cli-model-{uuid.uuid4().hex[:6]}"
    assert fairway(sim_stack, "price", "set", model, "--input", "0.2", "--output", "0.8",
                   "--flex-discount", "20") == 0
    assert "realtime 0.200000 / 0.800000, batch 0.100000 / 0.400000, flex 0.160000 / " \
           "0.640000" in capsys.readouterr().out
    assert fairway(sim_stack, "price", "list") == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith(model + " "))
    assert "0.200000 / 0.800000" in line and "0.100000 / 0.400000" in line
    assert any(row.startswith("sim-model ") and "unpriced" in row for row in out.splitlines())
    assert fairway(sim_stack, "price", "unset", model) == 0
    with pytest.raises(SystemExit):
        fairway(sim_stack, "price", "set", model, "--input", "cheap", "--output", "1")
    assert "is not an amount" in capsys.readouterr().err


def test_spend_table_csv_and_budget(sim_stack: Stack, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path) -> None:
    admin = Admin(sim_stack.base_url)
    name = f"cli-spend-{uuid.uuid4().hex[:6]}"
    tid, _ = admin.create_tenant(name)
    model = f"cli-model-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", "/admin/prices", json={"model": model, "input_per_mtok": "3",
                                           "output_per_mtok": "3"})
    ended_job(sim_stack.database_url, tid, model, prompt_tokens=M, completion_tokens=M)  # 6
    assert fairway(sim_stack, "spend", "--tenant", name, "--by", "model") == 0
    out = capsys.readouterr().out
    assert any(row.startswith(model + " ") and "6.000000" in row for row in out.splitlines())
    assert "Total: 6.000000 USD for 1 requests" in out
    target = tmp_path / "spend.csv"
    assert fairway(sim_stack, "spend", "--tenant", name, "--csv", str(target)) == 0
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [(r["model"], r["cost"]) for r in rows] == [(model, "6.000000")]
    assert fairway(sim_stack, "budget", "set", name, "--monthly", "5", "--hard-stop") == 0
    out = capsys.readouterr().out
    assert "6.000000 of 5.000000 USD" in out and "(120.00%)" in out and "STOPPED" in out
    assert fairway(sim_stack, "budget", "remove", name) == 0
    assert fairway(sim_stack, "budget", "show", name) == 0
    assert "no budget; spent 6.000000 USD" in capsys.readouterr().out
