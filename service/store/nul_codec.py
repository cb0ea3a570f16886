"""Requests may contain U+0000 (vLLM and OpenAI accept it; a byte-level tokenizer can decode
a token to it), but Postgres JSONB, where every job's request is stored, cannot hold it.

Strings are stored with a reversible escape: the private-use character U+E000 escapes itself
(doubled) and NUL (U+E000 followed by "0"). Only strings that contain either character change,
so ordinary requests are stored exactly as sent. Encode before insert (realtime and batch);
decode wherever a worker reads the request back.
"""

from __future__ import annotations

import json
import re
from typing import Any

ESC = "\ue000"
_ESCAPED = re.compile(ESC + "(.)", re.DOTALL)


def _encode_str(s: str) -> str:
    if "\x00" not in s and ESC not in s:
        return s
    return s.replace(ESC, ESC + ESC).replace("\x00", ESC + "0")


def _decode_str(s: str) -> str:
    if ESC not in s:
        return s
    return _ESCAPED.sub(lambda m: ESC if m.group(1) == ESC else "\x00", s)


def _walk(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k): _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return value


def encode(value: Any) -> Any:
    """A JSON-able value with NUL (and the escape) escaped in every string."""
    return _walk(value, _encode_str)


def decode(value: Any) -> Any:
    """The value ``encode`` was given."""
    return _walk(value, _decode_str)


def result_text(result: dict[str, Any] | None) -> str:
    """A job row's output text (``jobs.result``, escaped like requests)."""
    return str(decode(result or {}).get("text", ""))


def encode_json_text(text: str) -> str:
    """``encode`` for a JSON document already dumped (the batch path dumps in Rust). The
    cheap test comes first: most documents contain neither character in any form."""
    if "\\u0000" not in text and ESC not in text and "\\ue000" not in text.lower():
        return text
    return json.dumps(encode(json.loads(text)), ensure_ascii=False, separators=(",", ":"))
