"""A prompt too long for the model's context is a 400 as OpenAI answers it: code
`context_length_exceeded`, `param` naming the field that holds the prompt."""

from __future__ import annotations

import httpx
import pytest

from tests.support.stack import Stack


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}]},
     "messages"),
    ("/v1/completions", {"prompt": "word " * 3000}, "prompt"),
])
def test_too_long_prompt_is_context_length_exceeded(sim_stack: Stack, make_tenant, path: str,
                                                     body: dict[str, object], param: str):
    _, key = make_tenant()
    r = httpx.post(sim_stack.base_url + path, timeout=60,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": "sim-model", "max_tokens": 100, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert "maximum context length" in error["message"]
