"""A request with a secret-looking prompt leaves no trace of it, of its output or of the API
key in the logs of the API, the dispatcher and the worker, even at DEBUG level and on error
paths; job lines are JSON and carry the job context."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from service.cli.bootstrap import create_tenant_with_key
from service.store.settings import EngineSettings, Settings
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, own_stack

MODEL = "sim-redact"
ENV = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_LOG_LEVEL": "DEBUG",
       "FAIRWAY_LEASE_SECONDS": "3", "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
       "FAIRWAY_MAX_NUM_SEQS": "4", "FAIRWAY_MAX_MODEL_LEN": "512"}
PROCESSES = ("api", "scheduler", "worker-redact-1")


@pytest.fixture(scope="module")
def debug_stack() -> Iterator[Stack]:
    """A stack of its own (database and Redis db), so its logs hold only this module's traffic
    and its dispatcher is the active one."""
    with own_stack("redact", ENV, workers=("redact-1",)) as stack:
        yield stack


def _logs(stack: Stack) -> dict[str, str]:
    return {name: (stack.log_dir / f"{name}.log").read_text(errors="replace")
            for name in PROCESSES}


def test_no_prompt_output_or_key_in_logs(debug_stack: Stack):
    settings = Settings(database_url=debug_stack.database_url, redis_url=debug_stack.redis_url,
                        engine=EngineSettings(kind="sim", served_model_name=MODEL))
    _, key = create_tenant_with_key(settings, f"redact-{uuid.uuid4().hex[:8]}",
                                    plan=PATIENT_PLAN)
    secret = f"SECRET-{uuid.uuid4().hex}"
    prompt = f"my password is {secret} and my card is 4111 1111 1111 1111"
    api = openai.OpenAI(base_url=debug_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=60)
    messages = [{"role": "user", "content": prompt}]

    outputs = [api.chat.completions.create(model=MODEL, messages=messages, max_tokens=24,
                                           temperature=0).choices[0].message.content or ""]
    stream = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=24,
                                         temperature=0, stream=True, user=secret)
    outputs.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    outputs.append(api.completions.create(model=MODEL, prompt=prompt, max_tokens=24,
                                          temperature=0).choices[0].text)
    # Error paths: refused by the API; refused by the engine (prompt beyond the context).
    with pytest.raises(openai.APIStatusError):
        api.chat.completions.create(model=MODEL, messages=messages, max_tokens=10**6)
    with pytest.raises(openai.APIStatusError):
        api.chat.completions.create(model=MODEL, max_tokens=8, messages=[
            {"role": "user", "content": (prompt + " ") * 200}])
    # A bad key: the API must not log what it was sent either.
    wrong_key = f"fw-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    assert httpx.post(debug_stack.base_url + "/v1/chat/completions", timeout=10,
                      headers={"Authorization": f"Bearer {wrong_key}"},
                      json={"model": MODEL, "messages": messages}).status_code == 401

    debug_stack.stop()  # flush and close every log
    logs = _logs(debug_stack)
    for name, text in logs.items():
        assert text.strip(), f"{name} wrote no log"
        assert secret not in text, f"the prompt's secret leaked into the {name} log"
        assert "4111 1111" not in text, f"the prompt leaked into the {name} log"
        assert key not in text and key[11:] not in text, f"the API key leaked into {name}"
        assert wrong_key[11:] not in text, f"a presented key leaked into {name}"
        for output in outputs:
            if len(output) >= 12:
                assert output not in text, f"an output leaked into the {name} log"

    # Log lines are JSON; the worker's lines about a job carry its context.
    job_lines = []
    for name, text in logs.items():
        records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert records, f"{name} wrote no JSON log lines"
        job_lines += [r for r in records if r.get("msg") == "job started"]
    assert len(job_lines) >= 4
    for record in job_lines:
        assert {"job_id", "tenant", "class", "attempt"} <= set(record), record
