"""The worker's "job ended" line on the realtime path names the job (its public id too), the
tenant and the tokens, so the log joins what the API told the user."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.stack import Stack, wait_until


def test_job_ended_line_names_job_tenant_and_tokens(sim_stack: Stack, make_tenant):
    tenant_id, key = make_tenant()
    r = httpx.post(sim_stack.base_url + "/v1/chat/completions", timeout=60,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": "sim-model", "max_tokens": 5,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    job = "job_" + r.json()["id"].removeprefix("chatcmpl-")  # the jobs API's id for it
    usage = r.json()["usage"]
    log_path = sim_stack.procs["worker-sim-1"].log_path

    def ended() -> dict[str, Any] | None:
        for line in log_path.read_text(errors="replace").splitlines():
            if '"job ended' in line and job in line:
                found: dict[str, Any] = json.loads(line)
                return found
        return None

    wait_until(lambda: ended() is not None, 10, "the job ended line", sim_stack)
    line = ended()
    assert line is not None
    assert line["job"] == job and line["job_id"].replace("-", "") == job.removeprefix("job_")
    assert line["tenant"] == str(tenant_id)
    assert line["prompt_tokens"] == usage["prompt_tokens"]
    assert line["completion_tokens"] == usage["completion_tokens"]
