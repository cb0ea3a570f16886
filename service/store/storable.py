"""What Postgres can hold: text that UTF-8 can encode, and, outside JSONB request bodies (which
``nul_codec`` escapes), no U+0000. JSON allows both a lone surrogate (``"\\ud800"``) and
``"\\u0000"``; a client may send either in any string field, so everything we store is checked
first and refused with the field's path, instead of failing deep in the database driver.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError

_SURROGATE = re.compile("[\ud800-\udfff]")
_POISON = re.compile("[\x00\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def quoted(text: str) -> str:
    """``text`` with U+0000 and lone surrogates written as JSON writes them (``\\u0000``,
    ``\\ud800``): for a message or field path that quotes what a client sent, so the message
    itself can be stored in Postgres and encoded as UTF-8 (a 400 that quotes a surrogate
    would otherwise fail as a 500, a batch error that quotes NUL fail the whole batch)."""
    if _POISON.search(text) is None:
        return text
    return _POISON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def first_unstorable(value: Any, *, allow_nul: bool, path: str = "") -> tuple[str, str] | None:
    """(path, why) of the first string in ``value`` (dict keys included) that Postgres cannot
    store: one with a lone surrogate, or with U+0000 unless ``allow_nul``. None if all can."""
    if isinstance(value, str):
        if has_lone_surrogate(value):
            return path, "contains an invalid Unicode code point (a lone surrogate)"
        if not allow_nul and "\x00" in value:
            return path, "contains a NUL character (U+0000)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = quoted(str(key))  # the path names the key: it must be printable itself
            sub = f"{path}.{name}" if path else name
            found = (first_unstorable(key, allow_nul=allow_nul, path=sub)
                     or first_unstorable(item, allow_nul=allow_nul, path=sub))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = first_unstorable(item, allow_nul=allow_nul, path=f"{path}[{i}]")
            if found:
                return found
    return None


def refuse_unstorable(data: Any, *, allow_nul: bool) -> Any:
    """For a pydantic ``mode="before"`` model validator: the data, or a validation error that
    names the field (the API's handler turns it into a 400 with ``param`` set)."""
    try:
        found = first_unstorable(data, allow_nul=allow_nul)
    except RecursionError:  # free-form JSON (a response_format schema, tools) nested ~500 deep
        raise PydanticCustomError("invalid_value", "the body is nested too deeply") from None
    if found is not None:
        path, why = found
        raise PydanticCustomError("invalid_text", "{path} {why}", {"path": path, "why": why})
    return data


class StorableModel(BaseModel):
    """A request body whose every string Postgres can store as plain text."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        return refuse_unstorable(data, allow_nul=False)
