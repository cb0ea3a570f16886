"""The body of ``POST /v1/responses`` (text only), and what the job stores of it.

The stored request is the chat form the worker already runs (``messages``: the instructions
as a system message, then the input), plus what the Response object echoes back
(``instructions``, ``metadata``, ``max_output_tokens``, ``background``, ...). What Fairway
cannot honour (tools, files, images, structured outputs, conversation state) is refused with
a 400 that names the parameter, never ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from scheduler.tiers import ServiceTier
from service.store.storable import refuse_unstorable
from service.web.errors import APIError

# Content parts a message may carry: text in, and text a previous answer gave (assistant turns).
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
ROLES = frozenset({"user", "assistant", "system", "developer"})
# Set (not null, not empty, not the no-op value) means the client wants something we lack.
_REFUSED = {
    "tools": "tools (function calling, built-in tools) are not supported",
    "previous_response_id": "previous_response_id is not supported: send the whole "
                            "conversation as input",
    "conversation": "conversation is not supported: send the whole conversation as input",
    "prompt": "prompt templates are not supported",
    "reasoning": "reasoning options are not supported by the served models",
    "include": "include is not supported",
    "top_logprobs": "top_logprobs is not supported",
}


class ResponseCreate(BaseModel):
    # Unknown fields are ignored (as for chat completions); known ones we cannot honour are
    # refused by `refusal()`.
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    service_tier: ServiceTier | None = None
    stream: bool = False
    background: bool = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    parallel_tool_calls: bool | None = None
    # Fairway extension (the SDK's extra_body): finish within this many ms.
    deadline_ms: int | None = Field(default=None, gt=0, le=7 * 24 * 3600 * 1000)
    # vLLM-compatible extension: keep generating past EOS up to max_output_tokens.
    ignore_eos: bool = False

    tools: list[Any] | None = None
    tool_choice: Any = None
    previous_response_id: str | None = None
    conversation: Any = None
    prompt: Any = None
    reasoning: Any = None
    include: list[Any] | None = None
    top_logprobs: int | None = None
    text: Any = None

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        return refuse_unstorable(data, allow_nul=True)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and (len(value) > 16 or any(
                len(k) > 64 or len(v) > 512 for k, v in value.items())):
            raise ValueError("at most 16 pairs, keys up to 64 and values up to 512 characters")
        return value

    def refusal(self) -> APIError | None:
        """The 400 for the first parameter asked for that Fairway does not support."""
        for name, why in _REFUSED.items():
            if getattr(self, name):
                return _unsupported(name, why)
        if self.tool_choice not in (None, "none", "auto"):
            return _unsupported("tool_choice", "tool_choice needs tools, which are not "
                                               "supported")
        fmt = self.text.get("format") if isinstance(self.text, dict) else None
        if self.text is not None and not (isinstance(self.text, dict) and (
                fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"))):
            return _unsupported("text.format", "only plain text output (text.format type "
                                               "'text') is supported")
        if self.background and self.store is False:
            return APIError(400, "background responses must be stored: drop store=false.",
                            code="invalid_value", param="store")
        return None

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the worker runs: the instructions first, then the input."""
        out = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": self.input}]
        if not self.input:
            raise APIError(400, "input must not be an empty list.", code="invalid_value",
                           param="input")
        return out + [_message(item, f"input[{i}]") for i, item in enumerate(self.input)]

    def stored(self) -> dict[str, Any]:
        """The job's request: chat messages plus what the Response object echoes."""
        keep = self.model_dump(mode="json", exclude_none=True, exclude={
            "input", *_REFUSED, "tool_choice", "text", "parallel_tool_calls"})
        return {**keep, "messages": self.messages()}


def _message(item: Any, param: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise APIError(400, f"{param} must be a message object.", code="invalid_value",
                       param=param)
    kind = item.get("type", "message")
    if kind != "message":
        raise _unsupported(param, f"{param}: input items of type '{kind}' are not supported "
                                  "(text messages only)")
    role = item.get("role")
    if role not in ROLES:
        raise APIError(400, f"{param}.role must be one of {sorted(ROLES)}.",
                       code="invalid_value", param=f"{param}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise APIError(400, f"{param}.content must be a string or a list of text parts.",
                       code="invalid_value", param=f"{param}.content")
    texts = []
    for j, part in enumerate(content):
        where = f"{param}.content[{j}]"
        part_type = part.get("type") if isinstance(part, dict) else None
        if part_type not in TEXT_PARTS:
            raise _unsupported(where, f"{where}: content of type '{part_type}' is not "
                                      "supported (images, files and audio are not; send "
                                      "input_text)")
        if not isinstance(part.get("text"), str):
            raise APIError(400, f"{where}.text must be a string.", code="invalid_value",
                           param=f"{where}.text")
        texts.append(part["text"])
    return {"role": role, "content": "".join(texts)}


def _unsupported(param: str, why: str) -> APIError:
    return APIError(400, why[0].upper() + why[1:] + ".", code="unsupported_parameter",
                    param=param)
