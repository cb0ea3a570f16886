"""JSON log lines, job context on every line about a job, and a redaction guard.

- ``JsonFormatter``: one JSON object per line: ts, level, logger, msg, the job context
  (job_id, tenant, class, attempt) and any other ``extra=`` fields; beside a ``job_id`` or
  ``batch_id`` (a UUID) its public id, ``job`` (``job_<hex>``) or ``batch`` (``batch_<hex>``).
- ``bind_job(...)``: sets the job context for the current task (contextvars: each asyncio
  task and thread has its own), so every line logged while running a job carries it.
- ``bind_request(request_id)``: the same for the HTTP request being served (the API's
  ``x-request-id``), so a client's request id finds every line logged while serving it.
- The guard: ``extra=`` fields whose names are known to hold user content or credentials
  (prompt, messages, text, output, api_key, authorization, ...) are dropped, not logged;
  anything that looks like a Fairway API key or a bearer token is masked in the message and
  in tracebacks. It is a backstop: the code must not log such things in the first place.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import re
import uuid
from typing import Any

SENSITIVE_FIELDS = frozenset({
    "prompt", "prompts", "messages", "message_content", "content", "text", "input", "output",
    "outputs", "completion", "result", "request", "body", "payload", "delta", "choices",
    "api_key", "key", "authorization", "headers", "token", "secret", "password", "admin_token",
    "secret_key", "cookie",
})
REDACTED = "[redacted]"
# Fairway keys (fw- + urlsafe base64) and any bearer credential.
_SECRET_PATTERNS = (re.compile(r"fw-[A-Za-z0-9_\-]{16,}"),
                    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-.=]{8,}"))
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "taskName"}
_CONTEXT_KEYS = ("request_id", "job", "job_id", "batch", "tenant", "class", "attempt")
_ALIASES = {"tenant_id": "tenant", "job_class": "class", "kind": "class"}

_job_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "fairway_job_context", default=None)
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fairway_request_id", default=None)


def bind_request(request_id: str) -> contextvars.Token[str | None]:
    return _request_id.set(request_id)


def unbind_request(token: contextvars.Token[str | None]) -> None:
    _request_id.reset(token)


def current_request_id() -> str | None:
    """The id of the HTTP request being served here, if any."""
    return _request_id.get()


def bind_job(*, job_id: object, tenant: object = None, job_class: object = None,
             attempt: object = None) -> contextvars.Token[dict[str, Any] | None]:
    context: dict[str, Any] = {"job_id": str(job_id)}
    for key, value in (("tenant", tenant), ("class", job_class), ("attempt", attempt)):
        if value is not None:
            context[key] = value if isinstance(value, int) else str(value)
    return _job_context.set(context)


def unbind_job(token: contextvars.Token[dict[str, Any] | None]) -> None:
    _job_context.reset(token)


def scrub(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda mt: (mt.group(1) if mt.groups() else "") + REDACTED, text)
    return text


def safe_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's extra fields, minus the sensitive ones, plus the bound job context."""
    request_id = _request_id.get()
    fields: dict[str, Any] = {"request_id": request_id} if request_id else {}
    fields.update(_job_context.get() or {})
    for name, value in record.__dict__.items():
        if name in _STANDARD or name.startswith("_"):
            continue
        if name.lower() in SENSITIVE_FIELDS:
            continue
        name = _ALIASES.get(name, name)
        if isinstance(value, str | int | float | bool) or value is None:
            fields[name] = scrub(value) if isinstance(value, str) else value
        else:
            fields[name] = scrub(str(value))
    # The ids users see (the API, the CLI, the dashboard) beside the UUIDs the code logs,
    # so a line joins what a user was shown.
    for internal, public, prefix in (("job_id", "job", "job_"), ("batch_id", "batch", "batch_")):
        if public not in fields and fields.get(internal) is not None:
            shown = _public_id(fields[internal], prefix)
            if shown is not None:
                fields[public] = shown
    return fields


def _public_id(value: object, prefix: str) -> str | None:
    text = str(value)
    if text.startswith(prefix):
        return text
    try:
        return prefix + uuid.UUID(text).hex
    except ValueError:
        return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        line.update(safe_fields(record))
        if record.exc_info:
            line["exc"] = scrub(self.formatException(record.exc_info))
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The plain one-line format (FAIRWAY_LOG_FORMAT=text), with the same guard."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = scrub(super().format(record))
        ctx = " ".join(f"{k}={v}" for k, v in safe_fields(record).items()
                       if k in _CONTEXT_KEYS)
        return f"{base} {ctx}" if ctx else base
