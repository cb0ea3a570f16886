"""A batch created with a key that has a model allow-list: the file's model (a batch runs one
model; its first line's names it, lines naming another fail validation) is checked when the
batch is created, as a request's model is at the door, so a key cannot reach through a batch
a model it may not call directly."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.files.file_records import get_file
from service.files.storage import FileStorage
from service.quotas.key_limits import key_policy_of, model_not_allowed
from service.store.models.files import parse_file_id

MAX_LINES_LOOKED_AT = 100  # blank or unreadable lines before the first request line


def first_model(storage: FileStorage, key: str) -> str | None:
    """The model of the file's first request line; None when no line says (validation then
    fails the file or its lines)."""
    with storage.open_reader(key) as reader:
        for _ in range(MAX_LINES_LOOKED_AT):
            raw = reader.readline()
            if not raw:
                return None
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                return None
            body = line.get("body") if isinstance(line, dict) else None
            model = body.get("model") if isinstance(body, dict) else None
            return model if isinstance(model, str) else None
    return None


async def check_batch_model(request: Any, session: AsyncSession, storage: FileStorage, *,
                            tenant_id: uuid.UUID, input_file_id: str) -> None:
    """Raise the 403 for a batch whose model is outside the key's allow-list."""
    policy = key_policy_of(request)
    if policy.allowed_models is None:
        return
    file_id = parse_file_id(input_file_id)
    source = await get_file(session, file_id=file_id, tenant_id=tenant_id) if file_id else None
    if source is None:
        return  # create_batch answers the 404
    model = await asyncio.to_thread(first_model, storage, source.storage_key)
    if model is not None and not policy.allows(model):
        raise model_not_allowed(model)
