"""API keys: generated once, shown once, stored as an HMAC keyed by the server secret."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "fw-"
PREFIX_LEN = 11  # "fw-" + 8 characters: enough to tell keys apart in lists, useless to attackers


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str, secret: str) -> str:
    # Keys are 256-bit random, so a keyed hash needs no per-key salt; the HMAC key means a
    # leaked table alone is not enough to check guesses.
    return hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest()


def display_prefix(key: str) -> str:
    return key[:PREFIX_LEN]
