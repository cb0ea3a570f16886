"""Request bodies for the OpenAI-compatible endpoints, validated before anything is stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from scheduler.tiers import ServiceTier
from service.jobs.response_format import ResponseFormat
from service.store.storable import refuse_unstorable


def unsupported(param: str, what: str = "") -> PydanticCustomError:
    """A refusal of a feature we cannot honour, in OpenAI's words; raised by the validator of
    the field itself, so the 400 names it as ``param`` (service.web.validation)."""
    return PydanticCustomError(
        "unsupported_parameter",
        "Unsupported parameter: '{param}' is not supported by this service{what}.",
        {"param": param, "what": what})


class StreamOptions(BaseModel):
    include_usage: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class _GenerationParams(BaseModel):
    # Unknown OpenAI fields are ignored (as vLLM's server does); ones we cannot honour
    # are refused explicitly below instead of silently changing the output.
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    service_tier: ServiceTier | None = None
    user: str | None = None
    # Fairway extension (send with the SDK's extra_body): finish within this many ms.
    deadline_ms: int | None = Field(default=None, gt=0, le=7 * 24 * 3600 * 1000)
    # vLLM-compatible extension: keep generating past EOS up to max_tokens (benchmarks).
    ignore_eos: bool = False
    # Structured outputs (service.jobs.response_format): text, json_object or json_schema.
    response_format: ResponseFormat | None = None

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        """Every string must be one Postgres can store (U+0000 is escaped in the stored body;
        a lone surrogate cannot be stored at all)."""
        return refuse_unstorable(data, allow_nul=True)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > 4 or any(not s for s in stops):
            raise PydanticCustomError("invalid_value",
                                      "'stop' takes at most 4 non-empty strings.")
        return stops

    def stop_list(self) -> list[str]:
        return list(self.stop or [])


class ChatCompletionRequest(_GenerationParams):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Any] | None = None
    logprobs: bool | None = None

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise unsupported("tools")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise unsupported("logprobs")
        return value

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_GenerationParams):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[str]) -> str:
        if isinstance(value, str):
            return value
        if len(value) != 1:
            raise unsupported("prompt", " as a list of several prompts: send one prompt per "
                                        "request (use batches for many)")
        return value[0]

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise unsupported("echo")
        return value

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise unsupported("suffix")
        return value

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens
