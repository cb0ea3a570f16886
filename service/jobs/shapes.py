"""OpenAI response objects: chat.completion(.chunk) and text_completion, built from job data."""

from __future__ import annotations

import json
from typing import Any


def usage_dict(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


class ShapeBuilder:
    """Builds the objects for one job; `chat` selects chat.completion vs text_completion."""

    def __init__(self, *, chat: bool, public_id: str, created: int, model: str,
                 service_tier: str) -> None:
        self.chat = chat
        self.id = public_id
        self.created = created
        self.model = model
        self.service_tier = service_tier

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "service_tier": self.service_tier, "system_fingerprint": None}

    def completion(self, text: str, finish_reason: str | None,
                   usage: dict[str, int]) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason, "logprobs": None}
            body = self._base("chat.completion")
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
            body = self._base("text_completion")
        body["choices"] = [choice]
        body["usage"] = usage
        return body

    def chunk(self, text: str | None, *, finish_reason: str | None = None, first: bool = False,
              with_usage_field: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason,
                                      "logprobs": None}
            body = self._base("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish_reason,
                      "logprobs": None}
            body = self._base("text_completion")
        body["choices"] = [choice]
        if with_usage_field:
            body["usage"] = None
        return body

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        body = self._base("chat.completion.chunk" if self.chat else "text_completion")
        body["choices"] = []
        body["usage"] = usage
        return body


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
