"""The official openai SDK drives a whole batch on the real engine (shared vllm_stack)."""

from __future__ import annotations

import io
import json
import time

import openai

from tests.support.stack import Stack

MODEL = "SmolLM2-135M-Instruct"
CHAT = "/v1/chat/completions"


def test_batch_on_the_real_engine_with_one_bad_line(vllm_stack: Stack):
    from service.cli.bootstrap import create_tenant_with_key
    from service.store.settings import Settings

    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    _, key = create_tenant_with_key(settings, f"e2e-batch-{time.time_ns()}")
    api = openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=60)
    questions = {"q1": "What is 2+2?", "q2": "Name a colour.", "q3": "Say hello."}
    lines = [json.dumps({"custom_id": cid, "method": "POST", "url": CHAT,
                         "body": {"model": MODEL, "max_tokens": 12, "temperature": 0,
                                  "messages": [{"role": "user", "content": text}]}})
             for cid, text in questions.items()]
    lines.insert(1, json.dumps({"custom_id": "bad", "method": "GET", "url": CHAT,
                                "body": {"model": MODEL, "messages": []}}))
    uploaded = api.files.create(file=("e2e.jsonl", io.BytesIO("\n".join(lines).encode())),
                                purpose="batch")
    batch = api.batches.create(input_file_id=uploaded.id, endpoint=CHAT,
                               completion_window="24h")
    deadline = time.monotonic() + 300
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, f"batch stuck in {batch.status}"
        time.sleep(0.5)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed,
            batch.request_counts.failed) == (4, 3, 1)
    output = [json.loads(x) for x in api.files.content(batch.output_file_id).text.splitlines()]
    assert {o["custom_id"] for o in output} == set(questions)
    for entry in output:
        body = entry["response"]["body"]
        assert entry["response"]["status_code"] == 200 and body["model"] == MODEL
        assert body["choices"][0]["message"]["content"].strip()
    errors = [json.loads(x) for x in api.files.content(batch.error_file_id).text.splitlines()]
    assert [(e["custom_id"], e["error"]["code"], e["error"]["line"]) for e in errors] == [
        ("bad", "invalid_method", 2)]
    assert batch.usage.output_tokens > 0
