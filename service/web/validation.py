"""Pydantic's validation errors in OpenAI's words: which parameter, and what is wrong with it.

OpenAI answers a bad request with a sentence that names the parameter ("Missing required
parameter: 'messages'.", "Invalid type for 'messages[0].content': expected one of a string or
an array, but got an integer instead.") and sets ``param`` to the same path, in OpenAI's
notation: object keys joined by dots, list indexes in brackets (``messages[0].content``), as
the storable-text check (service.store.storable) already names fields. Pydantic's own wording
("Value error, ...", "Input should be ...") never reaches the client.

Pure: no FastAPI, so the batch line validator can describe its lines' errors the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.store.storable import quoted

# Where FastAPI found the value; not part of the parameter's name.
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie", "form"})
# Pydantic names the member of a union it tried (``content.str``, ``content.list[TextPart]``,
# ``x.function-after[...]``, a model's class name). Request fields are snake_case and never
# one of these, so such a segment is dropped from the client's path.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|bytes|none|decimal)$|[\[\]-]|^[A-Z]")
_EXPECTED = {
    "string": "a string", "int": "an integer", "float": "a decimal", "bool": "a boolean",
    "list": "an array", "dict": "an object", "model": "an object", "model_attributes": "an object",
    "bytes": "a string", "tuple": "an array", "set": "an array",
}
_BOUNDS = {  # pydantic type -> (above or below, comparison)
    "greater_than": ("below_min", ">"), "greater_than_equal": ("below_min", ">="),
    "less_than": ("above_max", "<"), "less_than_equal": ("above_max", "<="),
}


@dataclass(frozen=True, slots=True)
class Problem:
    message: str
    param: str | None
    code: str


def param_path(loc: Sequence[int | str]) -> str | None:
    """``("body", "messages", 0, "content", "str")`` -> ``"messages[0].content"``."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _UNION_MEMBER.search(part):
            out += f".{part}" if out else part
    return out or None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return "an object"


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return f"'{text[:64]}...'" if len(text) > 64 else f"'{text}'"


def _expected_type(kind: str) -> str | None:
    """``string_type``/``int_parsing``/... -> "a string"/"an integer"/...; None if no type."""
    for suffix in ("_type", "_parsing"):
        if kind.endswith(suffix):
            return _EXPECTED.get(kind[: -len(suffix)], "a value of another type")
    return None


def _number(bound: Any, given: Any) -> str:
    """OpenAI says "integer" for an integer field and "decimal" for a number field."""
    return "decimal" if isinstance(bound, float) or isinstance(given, float) else "integer"


def _one(error: dict[str, Any], param: str | None, siblings: list[dict[str, Any]]) -> Problem:
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    given = error.get("input")
    name = f"'{param}'" if param else "the request body"
    if kind == "missing" and param is None:  # no body at all
        return Problem("The request has no body. The API expects a JSON object.", None,
                       "invalid_json")
    if kind == "missing":
        return Problem(f"Missing required parameter: {name}.", param,
                       "missing_required_parameter")
    if kind == "extra_forbidden":
        return Problem(f"Unrecognized request argument supplied: {param}.", param,
                       "unknown_parameter")
    expected = _expected_type(kind)
    if expected is not None:
        options = [e for e in (_expected_type(str(s.get("type", ""))) for s in siblings) if e]
        unique = list(dict.fromkeys(options or [expected]))
        wanted = unique[0] if len(unique) == 1 else "one of " + " or ".join(unique)
        return Problem(f"Invalid type for {name}: expected {wanted}, but got "
                       f"{_json_type(given)} instead.", param, "invalid_type")
    if kind in ("literal_error", "enum"):
        return Problem(f"Invalid value for {name}: {_shown(given)}. Supported values are: "
                       f"{ctx.get('expected')}.", param, "invalid_value")
    if kind in _BOUNDS:
        side, op = _BOUNDS[kind]
        bound = next(ctx[k] for k in ("gt", "ge", "lt", "le") if k in ctx)
        number = _number(bound, given)
        where = "below minimum" if side == "below_min" else "above maximum"
        return Problem(f"Invalid {name}: {number} {where} value. "
                       f"Expected a value {op} {bound}, but got {given} instead.",
                       param, f"{number}_{side}_value")
    if kind in ("too_short", "too_long"):
        if kind == "too_short" and ctx.get("actual_length") == 0:
            return Problem(f"Invalid {name}: empty array. Expected an array with minimum length "
                           f"{ctx.get('min_length')}, but got an empty array instead.",
                           param, "empty_array")
        bound = "minimum" if kind == "too_short" else "maximum"
        limit = ctx.get("min_length" if kind == "too_short" else "max_length")
        return Problem(f"Invalid {name}: array too {kind[4:]}. Expected an array with {bound} "
                       f"length {limit}, but got an array with length "
                       f"{ctx.get('actual_length')} instead.", param,
                       f"array_{'below_min' if kind == 'too_short' else 'above_max'}_length")
    if kind in ("string_too_short", "string_too_long"):
        short = kind == "string_too_short"
        limit = ctx.get("min_length" if short else "max_length")
        length = len(given) if isinstance(given, str) else "?"
        return Problem(f"Invalid {name}: string too {'short' if short else 'long'}. Expected a "
                       f"string with {'minimum' if short else 'maximum'} length {limit}, but "
                       f"got a string with length {length} instead.", param,
                       f"string_{'below_min' if short else 'above_max'}_length")
    if kind == "value_error" and "error" in ctx:  # our own checks: their words, not pydantic's
        return Problem(f"Invalid value for {name}: {_lower(str(ctx['error']))}.", param,
                       "invalid_value")
    if kind == "json_invalid":
        return Problem(f"We could not parse the JSON body of your request "
                       f"({ctx.get('error', 'invalid JSON')}). The API expects a JSON object.",
                       None, "invalid_json")
    if kind in _CUSTOM_CODES:  # raised by our validators with OpenAI's wording already
        return Problem(_sentence(str(error.get("msg"))), param, kind)
    return Problem(f"Invalid value for {name}: {_lower(str(error.get('msg', 'invalid')))}.",
                   param, "invalid_value")


# PydanticCustomError types our validators raise; the type is the error code.
_CUSTOM_CODES = frozenset({"unsupported_parameter", "invalid_text", "invalid_value"})


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:].rstrip(".")


def describe(errors: Sequence[Any]) -> Problem:
    """The first problem of a pydantic (or FastAPI) error list, as OpenAI would put it."""
    if not errors:
        return Problem("Invalid request.", None, "invalid_value")
    first = dict(errors[0])
    param = param_path(first.get("loc", ()))
    ctx = first.get("ctx") or {}
    if param is None and ctx.get("path"):  # a whole-body check names its own field
        param = str(ctx["path"])
    siblings = [dict(e) for e in errors if param_path(e.get("loc", ())) == param]
    problem = _one(first, param, siblings)
    # The message quotes what was sent (a value, a key in the path): NUL or a lone surrogate
    # there would make it unstorable (a batch's errors) or unencodable (a 400 turned 500).
    return Problem(quoted(problem.message),
                   quoted(problem.param) if problem.param is not None else None, problem.code)
