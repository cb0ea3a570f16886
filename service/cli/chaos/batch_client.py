"""The fault's batch, through the official openai SDK as a user would send it: upload a JSONL
file, create the batch, follow it to its end, and download the output and error files."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from service.cli.chaos.cluster import MODEL
from service.cli.chaos.load import Tenant

TERMINAL = {"completed", "failed", "expired", "cancelled"}


@dataclass
class BatchRecord:
    tenant: str
    custom_ids: list[str]
    batch_id: str | None = None
    status: str | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    client_errors: list[str] = field(default_factory=list)  # what the SDK raised, by kind

    @property
    def accepted(self) -> bool:
        return self.batch_id is not None


def _client(base_url: str, tenant: Tenant) -> openai.OpenAI:
    # The SDK's own retries (with backoff) ride out a short blip, as for any user.
    return openai.OpenAI(base_url=base_url + "/v1", api_key=tenant.key, max_retries=5,
                         timeout=60)


def submit(base_url: str, tenant: Tenant, label: str, lines: int,
           max_tokens: int) -> BatchRecord:
    ids = [f"{label}-line-{i}" for i in range(lines)]
    body = "".join(json.dumps({"custom_id": cid, "method": "POST",
                               "url": "/v1/chat/completions",
                               "body": {"model": MODEL, "max_tokens": max_tokens,
                                        "temperature": 0,
                                        "messages": [{"role": "user",
                                                      "content": f"{cid}: summarise"}]}}) + "\n"
                   for cid in ids)
    record = BatchRecord(tenant.name, ids)
    client = _client(base_url, tenant)
    try:
        uploaded = client.files.create(file=(f"{label}.jsonl", io.BytesIO(body.encode())),
                                       purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id,
                                      endpoint="/v1/chat/completions", completion_window="24h")
    except openai.OpenAIError as exc:
        record.client_errors.append(_kind(exc))
        return record
    record.batch_id, record.status = batch.id, batch.status
    return record


def collect(base_url: str, tenant: Tenant, record: BatchRecord, timeout_s: float) -> None:
    """Follow the batch until it ends (or ``timeout_s``), then download its files."""
    if record.batch_id is None:
        return
    client = _client(base_url, tenant)
    deadline = time.monotonic() + timeout_s
    batch = None
    while time.monotonic() < deadline:
        try:
            batch = client.batches.retrieve(record.batch_id)
        except openai.OpenAIError as exc:
            record.client_errors.append(_kind(exc))
            time.sleep(1.0)
            continue
        record.status = batch.status
        if batch.status in TERMINAL:
            break
        time.sleep(0.5)
    if batch is None or batch.status not in TERMINAL:
        return
    for file_id, into in ((batch.output_file_id, record.output),
                          (batch.error_file_id, record.errors)):
        if not file_id:
            continue
        try:
            text = client.files.content(file_id).text
        except openai.OpenAIError as exc:
            record.client_errors.append(_kind(exc))
            continue
        into.extend(json.loads(line) for line in text.splitlines() if line.strip())


def _kind(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        code = body.get("code") or (body.get("error") or {}).get("code") or "error"
        return f"batch {exc.status_code} {code}"
    return f"batch transport {type(exc).__name__}"
