"""Assemble a batch's output and error files from its jobs, streaming, in OpenAI's line format.

Jobs are read with a server-side cursor in pages, so a 50k-line batch never has 50k rows in
memory. Every line of the input ends up exactly once: a succeeded job in the output file;
a failed, cancelled or expired job, or a line that failed validation, in the error file.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from service.batches.ingest import validation_errors_key
from service.files.storage import FileStorage, StorageWriter
from service.jobs.shapes import ShapeBuilder, usage_dict
from service.store.models.batches import Batch
from service.store.models.files import StoredFile
from service.store.models.jobs import Job, JobStatus
from service.store.nul_codec import result_text
from service.web.errors import _TYPES as ERROR_TYPES

PAGE = 1000
EXPIRED = {"code": "batch_expired",
           "message": "This request could not be executed before the completion window "
                      "expired."}
CANCELLED = {"code": "batch_cancelled",
             "message": "This request was not executed because the batch was cancelled."}

_COLUMNS = (Job.id, Job.custom_id, Job.status, Job.endpoint, Job.model, Job.result, Job.error,
            Job.finish_reason, Job.prompt_tokens, Job.completion_tokens, Job.cached_tokens,
            Job.finished_at, Job.created_at, Job.service_tier)


@dataclass(slots=True)
class Assembled:
    output_file_id: uuid.UUID | None
    error_file_id: uuid.UUID | None
    counts: dict[str, int]
    usage: dict[str, Any] = field(default_factory=dict)


class _Sink:
    """A storage object written lazily: no file at all when no line goes to it."""

    def __init__(self, storage: FileStorage, tenant_id: uuid.UUID) -> None:
        self.storage, self.tenant_id = storage, tenant_id
        self.id = uuid.uuid4()
        self.key = f"{tenant_id.hex}/{self.id.hex}"
        self.writer: StorageWriter | None = None
        self.bytes = self.lines = 0

    def write(self, data: bytes) -> None:
        if self.writer is None:
            self.writer = self.storage.open_writer(self.key)
        self.writer.write(data)
        self.bytes += len(data)
        self.lines += data.count(b"\n")

    def finish(self, session: Session, filename: str) -> uuid.UUID | None:
        if self.writer is None:
            return None
        self.writer.commit()
        session.add(StoredFile(id=self.id, tenant_id=self.tenant_id, purpose="batch_output",
                               filename=filename, bytes=self.bytes, line_count=self.lines,
                               storage_key=self.key))
        session.flush()  # no ORM relationship orders it before the batch's UPDATE
        return self.id

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


def assemble_results(session: Session, *, batch: Batch, storage: FileStorage) -> Assembled:
    """Write both files and add their rows to the session (the caller commits)."""
    out, err = _Sink(storage, batch.tenant_id), _Sink(storage, batch.tenant_id)
    counts = {"total": batch.total, "completed": 0, "failed": batch.invalid_lines,
              "cancelled": 0}
    tokens = {"input": 0, "output": 0, "cached": 0}
    try:
        query = (select(*_COLUMNS).where(Job.batch_id == batch.id).order_by(Job.line_no)
                 .execution_options(yield_per=PAGE))
        for row in session.execute(query):
            if row.status == JobStatus.SUCCEEDED:
                counts["completed"] += 1
                tokens["input"] += row.prompt_tokens or 0
                tokens["output"] += row.completion_tokens or 0
                tokens["cached"] += row.cached_tokens or 0
                out.write(_dump(_success_line(row)))
            else:
                # A cancelled line did not fail: it was stopped (never run, or aborted), and
                # is counted apart; an expired one did not finish in the window: failed.
                # Either way its line is in the error file, so every line appears once.
                counts["cancelled" if _was_cancelled(row) else "failed"] += 1
                err.write(_dump(_error_line(row)))
        _append_validation_errors(storage, batch.id, err)
        stem = batch.public_id
        assembled = Assembled(out.finish(session, f"{stem}_output.jsonl"),
                              err.finish(session, f"{stem}_error.jsonl"), counts)
    except BaseException:
        out.abort()
        err.abort()
        raise
    assembled.usage = {
        "input_tokens": tokens["input"], "output_tokens": tokens["output"],
        "total_tokens": tokens["input"] + tokens["output"],
        "input_tokens_details": {"cached_tokens": tokens["cached"]},
        "output_tokens_details": {"reasoning_tokens": 0}}
    return assembled


def _append_validation_errors(storage: FileStorage, batch_id: uuid.UUID, err: _Sink) -> None:
    key = validation_errors_key(batch_id)
    if not storage.exists(key):
        return
    with storage.open_reader(key) as reader:
        while chunk := reader.read(256 * 1024):
            err.write(chunk)


def _was_cancelled(row: Row[Any]) -> bool:
    code = (row.error or {}).get("code")
    return bool(row.status == JobStatus.CANCELLED and code != EXPIRED["code"])


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _request_id(row: Row[Any]) -> str:
    return f"req_{row.id.hex}"


def _success_line(row: Row[Any]) -> dict[str, Any]:
    chat = row.endpoint == "chat.completions"
    when = row.finished_at or row.created_at
    builder = ShapeBuilder(chat=chat, public_id=("chatcmpl-" if chat else "cmpl-") + row.id.hex,
                           created=int(when.timestamp()), model=row.model,
                           service_tier=row.service_tier)
    body = builder.completion(result_text(row.result), row.finish_reason,
                              usage_dict(row.prompt_tokens or 0, row.completion_tokens or 0))
    return {"id": f"batch_req_{row.id.hex}", "custom_id": row.custom_id,
            "response": {"status_code": 200, "request_id": _request_id(row), "body": body},
            "error": None}


def _error_line(row: Row[Any]) -> dict[str, Any]:
    base = {"id": f"batch_req_{row.id.hex}", "custom_id": row.custom_id}
    error = row.error or {}
    if row.status == JobStatus.FAILED:
        status = int(error.get("status", 500))
        body = {"error": {"message": error.get("message", "The request failed."),
                          "type": ERROR_TYPES.get(status, "api_error"),
                          "param": error.get("param"),
                          "code": error.get("code")}}
        return {**base, "response": {"status_code": status, "request_id": _request_id(row),
                                     "body": body}, "error": None}
    # Cancelled (by the batch's cancel, or at expiry) or somehow still active at the end.
    reason = EXPIRED if error.get("code") == EXPIRED["code"] else CANCELLED
    return {**base, "response": None, "error": dict(reason)}
