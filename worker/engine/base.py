"""The engine interface the worker drives: one request in, a stream of token deltas out.

An engine owns a model and its KV cache and batches many requests at once. The worker submits
`EngineRequest`s with `generate()`, which is an async generator of `TokenDelta`s: each delta
holds only what is new since the previous one, and the last one has ``finished=True``.

Errors convention
-----------------
- A request the engine cannot run (a prompt longer than the context window, an empty prompt,
  ``max_tokens < 1``) raises an `EngineError` subclass from `generate()` before any delta is
  yielded. Its message is safe to show to the client: the worker maps `EngineError` to a failed
  job carrying ``str(exc)``.
- `abort()` never raises for an unknown or already finished request id; it is a no-op then.
  After an abort the request's `generate()` iterator either yields a last delta with
  ``finish_reason="abort"`` or just ends.
- Anything else (a crashed engine process, a bug) is not an `EngineError`; the worker treats it
  as an engine failure, retries the job elsewhere and restarts the engine.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from worker.engine.lora import LoraSpec

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"


class EngineError(Exception):
    """A request the engine refuses; the message is meant for the client."""

    code = "invalid_request"  # the failed job's error code
    param: str | None = None  # the request parameter at fault, when one is


class PromptTooLong(EngineError):
    """The prompt (plus at least one output token) does not fit in the context window."""

    code = "context_length_exceeded"  # OpenAI's code for it, with param "messages"
    param = "messages"

    def __init__(self, num_prompt_tokens: int, max_model_len: int) -> None:
        super().__init__(
            f"prompt has {num_prompt_tokens} tokens, but the model's context window is "
            f"{max_model_len} tokens (prompt + output)"
        )
        self.num_prompt_tokens = num_prompt_tokens
        self.max_model_len = max_model_len


class InvalidRequest(EngineError):
    """Bad sampling settings or an empty prompt."""


class UnsupportedParameter(EngineError):
    """The request asks for something this engine cannot do (it is refused, not ignored)."""

    code = "unsupported_value"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class EngineNotStarted(RuntimeError):
    """`generate()` was called before `start()` or after `shutdown()`: an engine failure, not
    a bad request, so it is deliberately not an `EngineError`."""


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """Constrained decoding: the output must be one JSON object (``schema`` None), or JSON
    valid against ``schema``. Engine-neutral; each engine maps it to its own mechanism."""

    schema: dict[str, Any] | None = None


@dataclass(slots=True)
class SamplingSpec:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    structured: StructuredOutput | None = None  # None: free text


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingSpec
    priority: int = 0  # lower runs first (vLLM convention)
    # Prefix-cache namespace: requests share cached KV blocks only with requests of the same
    # salt (vLLM's cache_salt). Fairway sets one per tenant, so one tenant cannot learn
    # another's prompt prefixes from timing. None: one shared namespace.
    cache_salt: str | None = None
    # A tenant's LoRA adapter to run the request with (worker.engine.lora); None: the base
    # model. Its id is part of the prefix-cache namespace too.
    lora: LoraSpec | None = None


@dataclass(slots=True)
class TokenDelta:
    """One engine step's new output for one request."""

    token_ids: list[int]  # NEW token ids since the previous delta
    text: str  # NEW detokenized text since the previous delta (may be "")
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" when finished
    num_prompt_tokens: int
    num_cached_tokens: int = 0  # prompt tokens served from prefix cache, if known


@dataclass(slots=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_usage: float  # 0..1
    max_num_seqs: int
    kv_capacity_tokens: int
    # Recompute preemptions so far, for any reason (KV pressure or a better-priority request
    # taking the slot). Defaulted so engines that do not count report 0.
    num_preemptions: int = 0


@runtime_checkable
class Engine(Protocol):
    model_name: str  # the served model name clients pass as `model`

    async def start(self) -> None: ...

    def generate(self, request: EngineRequest) -> AsyncGenerator[TokenDelta, None]:
        """Async generator; the last delta has finished=True.

        If aborted, the last delta has finish_reason="abort" (or the iterator ends).
        """
        ...

    async def abort(self, request_id: str) -> None:
        """Frees the request's slot at once."""
        ...

    def stats(self) -> EngineStats: ...

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """Tokenizer chat template, add_generation_prompt=True."""
        ...

    def encode(self, text: str) -> list[int]:
        """Plain prompt for /v1/completions (adds BOS per the tokenizer's default)."""
        ...

    def decode(self, token_ids: list[int]) -> str: ...

    async def shutdown(self) -> None: ...


def supports_kv_offload(engine: object) -> bool:
    """Optional capability: can this engine keep a preempted request's KV in CPU memory and
    load it back on resume (the "swap" preemption mode, docs/preemption.md)?

    Engines say so with a ``supports_kv_offload`` attribute or property; one without it
    cannot (the worker then falls back to "recompute" and records why in the job's events).
    """
    return bool(getattr(engine, "supports_kv_offload", False))


def supports_structured_outputs(engine: object) -> bool:
    """Optional capability: can this engine constrain decoding to JSON or a JSON schema
    (`SamplingSpec.structured`)? Engines say so with a ``supports_structured_outputs``
    attribute or property; one without it cannot, and a request that asks is refused with
    `UnsupportedParameter` (never run as free text)."""
    return bool(getattr(engine, "supports_structured_outputs", False))


def validate_request(request: EngineRequest, max_model_len: int, *,
                     structured_outputs: bool = False) -> None:
    """Raise the `EngineError` both engines agree on for a request that cannot run;
    ``structured_outputs``: whether the engine can honour `SamplingSpec.structured`."""
    n = len(request.prompt_token_ids)
    if n == 0:
        raise InvalidRequest("prompt is empty")
    if request.sampling.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be >= 1, got {request.sampling.max_tokens}")
    if request.sampling.temperature < 0:
        raise InvalidRequest(f"temperature must be >= 0, got {request.sampling.temperature}")
    if not 0 < request.sampling.top_p <= 1:
        raise InvalidRequest(f"top_p must be in (0, 1], got {request.sampling.top_p}")
    if request.sampling.structured is not None and not structured_outputs:
        raise UnsupportedParameter(
            "response_format", "response_format json_object/json_schema is not supported: "
            "this worker's engine has no structured-output decoding")
    # One output token must fit, else the engine could never make progress.
    if n + 1 > max_model_len:
        raise PromptTooLong(n, max_model_len)
