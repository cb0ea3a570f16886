"""`fairway job show ID`: a job's timeline and facts, or a batch's detail, by any id a user
quotes, through the admin API; an unknown id is one line on stderr, no traceback."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from service.cli.main import main
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import Admin
from tests.support.explorer import WORKER, finished_batch, slow_job
from tests.support.stack import Stack


def fairway(stack: Stack, *args: str) -> int:
    return main(["--base-url", stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN, *args])


@pytest.fixture(scope="module")
def tenant(sim_stack: Stack) -> dict[str, str]:
    name = f"cli-explore-{uuid.uuid4().hex[:6]}"
    tid, _ = Admin(sim_stack.base_url).create_tenant(name)
    return {"id": tid, "name": name}


def test_a_job_timeline_in_the_terminal(sim_stack: Stack, tenant: dict[str, str],
                                        capsys: pytest.CaptureFixture[str]):
    job_id = slow_job(sim_stack.database_url, tenant["id"], queue_ms=1800, preempted=True)
    assert fairway(sim_stack, "job", "show", f"chatcmpl-{job_id.hex}") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"job_{job_id.hex}  succeeded  tenant {tenant['name']} (standard)")
    assert "Most of its 2,690 ms was waiting in the queue: 1,880 ms (69%)." in out
    steps = [line for line in out.splitlines() if re.match(r"  \d\d:\d\d:\d\d\.\d{3}  ", line)]
    assert [s.split("  ")[2].strip() for s in steps] == [
        "arrived, queued", "first token", "preempted", "placed on a worker", "started",
        "resumed", "ended"]
    assert f"on {WORKER}  mode=recompute" in steps[2]
    assert "Phases: queued 1,880 ms | decode 50 ms | parked 500 ms" in out
    assert "Queue wait 1,880 ms, TTFT 1,880 ms, TPOT 40 ms, total 2,690 ms" in out
    assert "SLO as admitted: standard, TTFT 1,000 ms" in out
    assert f"Logs: fairway logs --job job_{job_id.hex}" in out

    assert fairway(sim_stack, "job", "show", str(job_id), "--json") == 0
    assert json.loads(capsys.readouterr().out)["durations"]["parked_ms"] == 500


def test_a_batch_and_a_line_by_custom_id(sim_stack: Stack, tenant: dict[str, str],
                                         capsys: pytest.CaptureFixture[str]):
    batch_id, (_, _, failed) = finished_batch(sim_stack.database_url, tenant["id"])
    assert fairway(sim_stack, "job", "show", f"batch_{batch_id.hex}") == 0
    out = capsys.readouterr().out
    assert "3 lines: 2 completed, 1 failed, 0 cancelled" in out
    assert "explore.jsonl" in out and "1234" in out
    assert re.search(rf"3\s+c\s+job_{failed.hex}\s+engine_error\s+it broke", out)
    assert fairway(sim_stack, "job", "show", "c", "--batch", f"batch_{batch_id.hex}") == 0
    out = capsys.readouterr().out
    assert f"job_{failed.hex}  failed" in out and "Error: engine_error: it broke" in out
    assert f"Batch batch_{batch_id.hex} line 3, custom_id c" in out


def test_an_unknown_id_is_one_line(sim_stack: Stack, capsys: pytest.CaptureFixture[str]):
    assert fairway(sim_stack, "job", "show", f"job_{uuid.uuid4().hex}") != 0
    err = capsys.readouterr().err
    assert "No job or batch matches" in err and "(404)" in err and "Traceback" not in err
