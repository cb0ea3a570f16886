"""Standard Webhooks signing (the scheme OpenAI's webhooks use), through the
``standardwebhooks`` package: headers ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, space-separated when a rotated-out secret
still signs too)."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from collections.abc import Sequence

from standardwebhooks.webhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret, ``whsec_<base64 of 32 random bytes>``."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_hint(secret: str) -> str:
    """What the admin API shows of a secret after creation: enough to tell two apart."""
    return secret[: len(SECRET_PREFIX) + 4] + "..."


def signed_headers(*, msg_id: str, body: str, at: dt.datetime,
                   signing_secrets: Sequence[str]) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt (``at`` is its send time: a retry
    is signed afresh, so receivers' timestamp tolerance holds)."""
    signatures = [Webhook(secret).sign(msg_id, at, body) for secret in signing_secrets]
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": " ".join(signatures)}
