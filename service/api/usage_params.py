"""The usage API's query string read into a UsageQuery, each bad value a 400 in OpenAI's error
shape that names the parameter.

List parameters come either repeated (``group_by=model&group_by=batch``), in the brackets the
OpenAI SDK sends (``group_by[]=model``) or comma-separated (``group_by=model,batch``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from starlette.datastructures import QueryParams

from service.usage.buckets import WIDTHS, BadCursor, ceil_to, decode_cursor
from service.usage.completions import GROUP_FIELDS, UsageQuery
from service.web.errors import APIError

# Unix seconds up to the last second of year 9999 (what a datetime can hold).
MAX_TIMESTAMP = 253_402_300_799
_MAX_LIST = 100  # values of one list parameter
# Filters on things a tenant does not have: refused rather than ignored, so a filter never
# seems to apply when it does not.
_NO_SUCH_FILTER = {"project_ids": "projects", "user_ids": "users"}


def bad_param(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, message, code=code, param=param)


def _list(params: QueryParams, name: str) -> list[str]:
    values = [*params.getlist(name), *params.getlist(f"{name}[]")]
    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if len(out) > _MAX_LIST:
        raise bad_param(name, f"{name}: at most {_MAX_LIST} values.")
    return out


def one_value(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise bad_param(name, f"{name}: give one value, not {len(values)}.")
    return values[0] if values else None


def _integer(params: QueryParams, name: str, *, low: int, high: int, why: str = ""
             ) -> int | None:
    raw = one_value(params, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_param(name, f"Invalid type for '{name}': expected an integer, but got "
                         f"'{raw[:40]}' instead.", "invalid_type") from None
    if not low <= value <= high:
        raise bad_param(name, f"Invalid '{name}': {value} is not between {low} and {high}{why}.")
    return value


def _boolean(params: QueryParams, name: str) -> bool | None:
    raw = one_value(params, name)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        raise bad_param(name, f"Invalid '{name}': expected true or false, but got '{raw[:40]}'.",
                   "invalid_type")
    return raw.lower() == "true"


def uuid_list(params: QueryParams, name: str) -> tuple[uuid.UUID, ...]:
    out = []
    for raw in _list(params, name):
        try:
            out.append(uuid.UUID(raw))
        except ValueError:
            raise bad_param(name, f"Invalid '{name}': '{raw[:40]}' is not an id.") from None
    return tuple(out)


def _choices(params: QueryParams, name: str, allowed: Sequence[str]) -> tuple[str, ...]:
    values = _list(params, name)
    for value in values:
        if value not in allowed:
            raise bad_param(name, f"Invalid '{name}': '{value[:40]}' is not one of "
                             f"{', '.join(allowed)}.")
    return tuple(dict.fromkeys(values))


def usage_query(params: QueryParams, *, group_fields: Sequence[str] = GROUP_FIELDS,
                now: float | None = None) -> UsageQuery:
    """The query's parameters, checked; ``end_time`` defaults to now (its bucket included)."""
    for name, what in _NO_SUCH_FILTER.items():
        if _list(params, name):
            raise bad_param(name, f"'{name}' cannot be used: a Fairway tenant is one organization "
                             f"with no {what}. Filter by api_key_ids or models instead.",
                       "unsupported_parameter")
    start = _integer(params, "start_time", low=0, high=MAX_TIMESTAMP)
    if start is None:
        raise bad_param("start_time", "Missing required parameter: 'start_time'.",
                   "missing_required_parameter")
    width = one_value(params, "bucket_width") or "1d"
    if width not in WIDTHS:
        raise bad_param("bucket_width", f"Invalid 'bucket_width': '{width[:40]}' is not one of "
                                   f"{', '.join(WIDTHS)}.")
    rule = WIDTHS[width]
    end = _integer(params, "end_time", low=1, high=MAX_TIMESTAMP)
    if end is None:
        end = ceil_to(int(now if now is not None else time.time()) + 1, rule.seconds)
        if end <= start:
            raise bad_param("start_time", f"Invalid 'start_time': {start} is in the future; "
                                          "give an end_time after it.")
    if end <= start:
        raise bad_param("end_time", f"Invalid 'end_time': {end} is not after start_time {start}.")
    limit = _integer(params, "limit", low=1, high=rule.max_limit,
                     why=f" (the most buckets of width {width} a page holds)")
    page = one_value(params, "page")
    page_start = None
    if page is not None:
        try:
            page_start = decode_cursor(page, start_time=start, end_time=end,
                                       width_s=rule.seconds)
        except BadCursor:
            raise bad_param("page", "Invalid 'page': not a next_page value of this query."
                            ) from None
    return UsageQuery(start_time=start, end_time=end, bucket_width=width, limit=limit,
                      page_start=page_start, group_by=_choices(params, "group_by", group_fields),
                      models=tuple(_list(params, "models")),
                      api_key_ids=uuid_list(params, "api_key_ids"),
                      batch=_boolean(params, "batch"))
