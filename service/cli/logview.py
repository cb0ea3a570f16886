"""How `fairway logs` shows a log line: the JSON lines the processes write
(service.store.telemetry.logfmt) as one readable line each, and the filters that pick lines by
job, tenant or level. Pure functions over text, so they test without a stack."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

# Shown first, in this order, after the message; the rest follow as key=value.
_FIRST = ("job", "batch", "tenant", "tenant_name", "request_id", "attempt", "worker_id")
# Not repeated after the message: the head says them, or a public id stands for them.
_HIDDEN = frozenset({"ts", "level", "logger", "msg", "exc", "job_id", "batch_id"})
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


# The spellings of a job's or batch's id users see; the hex after the prefix is its UUID (a
# batch output line's request_id, req_<hex>, is its job's). batch_req_ before batch_.
_PREFIXES = ("job_", "batch_req_", "batch_", "chatcmpl-", "cmpl-", "resp_", "req_")


def _hex(value: str) -> str | None:
    """A job or batch id in any of its spellings (job_<hex>, chatcmpl-<hex>, a UUID) as hex."""
    for prefix in _PREFIXES:
        if value.startswith(prefix):
            value = value[len(prefix):]
            break
    try:
        return uuid.UUID(value).hex
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LineFilter:
    """What `--job`, `--request-id`, `--tenant` and `--level` ask for (None: anything).
    ``job`` may name a batch (batch_<hex>): its lines are the ones that carry that batch."""

    job: str | None = None
    tenant: str | None = None
    level: str | None = None
    request_id: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.job or self.tenant or self.level or self.request_id)

    def matches(self, record: dict[str, Any] | None) -> bool:
        if record is None:  # not a JSON line (a crash's raw traceback): only when unfiltered
            return not self.active
        if self.level:
            rank = logging.getLevelName(str(record.get("level", "INFO")).upper())
            if not isinstance(rank, int) or rank < logging.getLevelName(self.level.upper()):
                return False
        if self.request_id and record.get("request_id") != self.request_id:
            return False
        if self.job:
            wanted = _hex(self.job)
            batch = self.job.startswith("batch_") and not self.job.startswith("batch_req_")
            keys = ("batch_id", "batch") if batch else ("job_id", "job")
            seen = {_hex(str(record.get(k))) for k in keys if record.get(k)}
            if wanted is None or wanted not in seen:
                return False
        if self.tenant:
            seen_t = {str(record.get(k)) for k in ("tenant", "tenant_id", "tenant_name")
                      if record.get(k) is not None}
            if self.tenant not in seen_t:
                return False
        return True


def parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "msg" in record else None


def readable(record: dict[str, Any]) -> str:
    """`12:00:01.234 INFO  fairway.worker  job ended: succeeded  job=job_… tenant=… k=v`."""
    ts = str(record.get("ts", ""))
    clock = ts[11:23] if len(ts) >= 23 else ts
    head = (f"{clock} {record.get('level', '')!s:<7} {record.get('logger', '')}  "
            f"{record.get('msg', '')}")
    fields = dict(record)
    if "job" not in fields and fields.get("job_id"):
        hexed = _hex(str(fields["job_id"]))
        fields["job"] = f"job_{hexed}" if hexed else fields["job_id"]
    if "batch" not in fields and fields.get("batch_id"):
        hexed = _hex(str(fields["batch_id"]))
        fields["batch"] = f"batch_{hexed}" if hexed else fields["batch_id"]
    keys = [k for k in _FIRST if k in fields] + sorted(
        k for k in fields if k not in _FIRST and k not in _HIDDEN)
    tail = " ".join(f"{k}={fields[k]}" for k in keys if fields[k] is not None)
    text = f"{head}  {tail}" if tail else head
    if record.get("exc"):
        text += "\n" + str(record["exc"])
    return text


def render(line: str, *, raw: bool, only: LineFilter) -> str | None:
    """The line as `fairway logs` prints it (with its newline), or None when filtered out."""
    record = parse(line)
    if not only.matches(record):
        return None
    if raw or record is None:
        return line if line.endswith("\n") else line + "\n"
    return readable(record) + "\n"
