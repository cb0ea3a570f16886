"""A usage page as CSV: one row per result (a bucket and group that had use), for a
spreadsheet. Idle buckets have no row. Pure: no I/O."""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Sequence
from typing import Any

_METRICS = ("num_model_requests", "input_tokens", "input_cached_tokens", "output_tokens")


def usage_csv(page: dict[str, Any], group_by: Sequence[str]) -> str:
    groups = [c for g in group_by if g != "tenant_id"
              for c in ((g, "api_key_name") if g == "api_key_id" else (g,))]
    tenant = ["tenant_id", "tenant_name"] if "tenant_id" in group_by else []
    header = ["start_time", "end_time", "start_time_utc", *tenant, *groups, *_METRICS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for bucket in page["data"]:
        when = dt.datetime.fromtimestamp(bucket["start_time"], dt.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        for result in bucket["results"]:
            writer.writerow([bucket["start_time"], bucket["end_time"], when,
                             *(_cell(result.get(name)) for name in (*tenant, *groups)),
                             *(result[m] for m in _METRICS)])
    return out.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else _defuse(value)


def _defuse(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (a model or tenant name is the
    tenant's text) is quoted with a leading apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
