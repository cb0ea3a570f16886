"""Webhook payloads (OpenAI's event shape) and Standard Webhooks signatures, checked with the
`standardwebhooks` package a receiver would use."""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from service.store.models.webhooks import WebhookEvent
from service.store.webhook_events import (
    EVENT_TYPES,
    UnknownEventType,
    event_statements,
    payload_body,
)
from service.webhooks.signing import new_secret, secret_hint, signed_headers

AT = dt.datetime(2026, 11, 30, 12, 0, 5, 900_000, tzinfo=dt.UTC)


def _event() -> WebhookEvent:
    return WebhookEvent(id=uuid.UUID(int=0xABC), tenant_id=uuid.uuid4(), type="batch.completed",
                        data={"id": "batch_" + "1" * 32}, created_at=AT)


def test_payload_is_openais_event_shape():
    body = payload_body(_event())
    assert json.loads(body) == {"id": "evt_" + uuid.UUID(int=0xABC).hex, "object": "event",
                                "type": "batch.completed", "created_at": int(AT.timestamp()),
                                "data": {"id": "batch_" + "1" * 32}}
    assert " " not in body  # compact: what is signed is exactly what is sent


def test_event_types_cover_batches_and_background_responses():
    assert set(EVENT_TYPES) == {"batch.completed", "batch.failed", "batch.expired",
                                "batch.cancelled", "response.completed", "response.failed",
                                "response.cancelled", "response.incomplete",
                                "budget.threshold_reached"}
    with pytest.raises(UnknownEventType):
        event_statements(event_id=uuid.uuid4(), tenant_id=uuid.uuid4(), type_="batch.done",
                         data={}, now=AT)


def test_secrets_are_standard_webhooks_secrets():
    secret = new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert new_secret() != secret
    assert secret_hint(secret) == secret[:10] + "..." and secret[10:] not in secret_hint(secret)


def test_signature_verifies_with_standardwebhooks():
    secret, body = new_secret(), payload_body(_event())
    now = dt.datetime.now(dt.UTC)
    headers = signed_headers(msg_id="evt_1", body=body, at=now, signing_secrets=[secret])
    assert headers["webhook-id"] == "evt_1"
    assert headers["webhook-timestamp"] == str(int(now.timestamp()))
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("completed", "failed"), headers)


def test_during_a_rotation_either_secret_verifies():
    old, new, body = new_secret(), new_secret(), payload_body(_event())
    headers = signed_headers(msg_id="evt_2", body=body, at=dt.datetime.now(dt.UTC),
                             signing_secrets=[new, old])
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert Webhook(new).verify(body, headers) and Webhook(old).verify(body, headers)


def test_a_stale_timestamp_is_refused_by_receivers():
    """Each attempt is signed at its send time; an old signature would be refused."""
    secret, body = new_secret(), payload_body(_event())
    headers = signed_headers(msg_id="evt_3", body=body,
                             at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10),
                             signing_secrets=[secret])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)
