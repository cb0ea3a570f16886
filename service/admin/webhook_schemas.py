"""Request bodies for the admin API's webhook endpoints."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from service.store.storable import StorableModel
from service.store.webhook_events import EVENT_TYPES

URL_MAX = 2048  # the webhook_endpoints.url column
GRACE_MAX_S = 7 * 24 * 3600
_EVENT_TYPES_SCHEMA: dict[str, Any] = {"items": {"type": "string", "enum": list(EVENT_TYPES)}}


def _http_url(value: str) -> str:
    """An absolute http(s) URL with a host, as given (no normalisation: it is what we POST to)."""
    if value != value.strip() or any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError("url must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises for a malformed or out-of-range port
    except ValueError as exc:
        raise ValueError(f"url is not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be an absolute http:// or https:// URL with a host")
    del port
    return value


def _event_types(value: list[str]) -> list[str]:
    unknown = sorted(set(value) - set(EVENT_TYPES))
    if unknown:
        raise ValueError(f"unknown event types {unknown}; known: {list(EVENT_TYPES)}")
    return sorted(set(value), key=EVENT_TYPES.index)


class WebhookCreate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=URL_MAX)
    event_types: list[str] = Field(min_length=1, json_schema_extra=_EVENT_TYPES_SCHEMA)
    enabled: bool = True

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("event_types")
    @classmethod
    def _events(cls, value: list[str]) -> list[str]:
        return _event_types(value)


class WebhookUpdate(StorableModel):
    """Only the fields given change."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(default=None, min_length=1, max_length=URL_MAX)
    event_types: list[str] | None = Field(default=None, min_length=1,
                                          json_schema_extra=_EVENT_TYPES_SCHEMA)
    enabled: bool | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)

    @field_validator("event_types")
    @classmethod
    def _events(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _event_types(value)


class SecretRotate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    # How long the old secret keeps signing too (a second signature), so receivers can switch
    # without dropping deliveries; 0 ends it at once.
    previous_secret_grace_seconds: int = Field(default=24 * 3600, ge=0, le=GRACE_MAX_S)
