"""OpenAI's Response object and its streaming events, built from a Responses-API job.

The object carries what the official SDK's ``Response`` model requires (id, object,
created_at, model, output, parallel_tool_calls, tool_choice, tools, ...), the status from
``service.store.response_status``, one assistant ``message`` output item with one
``output_text`` part once the job has text, and usage in the Responses API's names.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from service.store import nul_codec
from service.store.models.jobs import Job
from service.store.nul_codec import result_text
from service.store.response_status import RESPONSE_PREFIX, response_status

MESSAGE_PREFIX = "msg_"


def response_id(job_id: uuid.UUID) -> str:
    return RESPONSE_PREFIX + job_id.hex


def _error_code(status: int) -> str:
    """A job's HTTP-style error status as one of the Response error codes the SDK knows."""
    if status == 429:
        return "rate_limit_exceeded"
    if status in (400, 413):
        return "invalid_prompt"
    return "server_error"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0

    def body(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": self.cached_tokens,
                                         "cache_write_tokens": 0},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + self.output_tokens}


@dataclass(frozen=True, slots=True)
class ResponseShape:
    """What does not change over a response's life: its id, request and echoed settings."""

    job_id: uuid.UUID
    created_at: dt.datetime
    model: str
    request: dict[str, Any]  # the stored request (service.jobs.response_schemas), decoded
    service_tier: str

    @classmethod
    def of(cls, job: Job) -> ResponseShape:
        request = nul_codec.decode(job.request)
        # The model as the client named it: an adapter's ft: name, where the job's column
        # holds the base model it runs on.
        return cls(job.id, job.created_at, str(request.get("model") or job.model), request,
                   job.service_tier)

    @property
    def id(self) -> str:
        return response_id(self.job_id)

    @property
    def message_id(self) -> str:
        return MESSAGE_PREFIX + self.job_id.hex

    def message(self, text: str, status: str) -> dict[str, Any]:
        """The output item: one assistant message with one output_text part."""
        return {"type": "message", "id": self.message_id, "status": status,
                "role": "assistant", "content": [self.text_part(text)]}

    @staticmethod
    def text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def body(self, status: str, *, text: str | None = None, usage: Usage | None = None,
             error: dict[str, Any] | None = None, finished_at: dt.datetime | None = None
             ) -> dict[str, Any]:
        r = self.request
        error = error or {}
        output = []
        if text is not None and status in ("completed", "incomplete"):
            output = [self.message(text, status)]
        return {
            "id": self.id, "object": "response",
            "created_at": int(self.created_at.timestamp()),
            "status": status,
            "background": bool(r.get("background", False)),
            "completed_at": (int(finished_at.timestamp())
                             if finished_at is not None and status == "completed" else None),
            "error": ({"code": _error_code(int(error.get("status") or 500)),
                       "message": str(error.get("message") or "The response failed.")}
                      if status == "failed" else None),
            "incomplete_details": ({"reason": "max_output_tokens"}
                                   if status == "incomplete" else None),
            "instructions": r.get("instructions"),
            "max_output_tokens": r.get("max_output_tokens"),
            "metadata": r.get("metadata") or {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": None,
            "service_tier": self.service_tier,
            "store": r.get("store", True),
            "temperature": r.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": r.get("top_p", 1.0),
            "truncation": r.get("truncation", "disabled"),
            "usage": usage.body() if usage is not None else None,
            "user": r.get("user"),
        }


def render(job: Job) -> dict[str, Any]:
    """A Responses-API job as the Response object ``GET /v1/responses/{id}`` returns."""
    status = response_status(job.status, job.finish_reason, job.started_at)
    usage = (Usage(job.prompt_tokens, job.completion_tokens or 0, job.cached_tokens or 0)
             if job.prompt_tokens is not None else None)
    text = result_text(job.result) if job.status == "succeeded" else None
    return ResponseShape.of(job).body(status, text=text, usage=usage, error=job.error or {},
                                      finished_at=job.finished_at)


class EventStream:
    """The Responses API's server-sent events for one response, numbered in order.

    The sequence is what the SDK's stream accumulator expects: ``response.created`` first
    (then ``response.queued`` or ``response.in_progress``), the message item and its text
    part added, text deltas, the text, part and item done, then one of
    ``response.completed``, ``response.incomplete`` or ``response.failed`` with the final
    object."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.sequence = 0
        self.text: list[str] = []
        self.opened = False  # the message item and its part were announced
        self.status = "queued"

    def _event(self, type_: str, **fields: Any) -> bytes:
        data = {"type": type_, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {type_}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    def start(self, status: str) -> list[bytes]:
        """``response.created``, then ``response.queued`` or ``response.in_progress``."""
        self.status = status
        return [self._event("response.created", response=self.shape.body(status)),
                self._event(f"response.{status}", response=self.shape.body(status))]

    def delta(self, text: str) -> list[bytes]:
        events = self._open()
        self.text.append(text)
        events.append(self._event("response.output_text.delta", item_id=self.shape.message_id,
                                  output_index=0, content_index=0, delta=text, logprobs=[]))
        return events

    def _open(self) -> list[bytes]:
        if self.opened:
            return []
        self.opened = True
        events = []
        if self.status == "queued":  # a background response that was waiting has started
            self.status = "in_progress"
            events.append(self._event("response.in_progress",
                                      response=self.shape.body("in_progress")))
        item = {**self.shape.message("", "in_progress"), "content": []}
        return [*events,
                self._event("response.output_item.added", output_index=0, item=item),
                self._event("response.content_part.added", item_id=self.shape.message_id,
                            output_index=0, content_index=0, part=self.shape.text_part(""))]

    def finish(self, final: dict[str, Any]) -> list[bytes]:
        """The text's end and the final object (``render`` of the finished job: completed,
        or incomplete at the length limit)."""
        status = final["status"]
        item = final["output"][0] if final["output"] else self.shape.message(
            "".join(self.text), status)
        text = item["content"][0]["text"]
        events = self._open()
        ids = {"item_id": self.shape.message_id, "output_index": 0, "content_index": 0}
        events += [
            self._event("response.output_text.done", **ids, text=text, logprobs=[]),
            self._event("response.content_part.done", **ids, part=self.shape.text_part(text)),
            self._event("response.output_item.done", output_index=0, item=item),
            self._event(f"response.{status}", response=final)]
        return events

    def failed(self, error: dict[str, Any]) -> bytes:
        """The job failed (``response.failed`` with the final object), or was cancelled: the
        Responses API has no cancelled stream event, so an ``error`` event says it (the
        object, from GET /v1/responses/{id}, has status ``cancelled``)."""
        if error.get("code") == "cancelled":
            return self.error("cancelled", str(error.get("message") or "Cancelled."))
        return self._event("response.failed", response=self.shape.body("failed", error=error))

    def error(self, code: str, message: str) -> bytes:
        """The stream cannot go on (timeout, lost relay); the response itself may."""
        return self._event("error", code=code, message=message, param=None)
