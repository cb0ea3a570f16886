"""OpenAI Files API routes: thin wrappers over service/files/file_records.py."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from service.files.file_records import (
    add_file,
    delete_file,
    file_view,
    get_file,
    list_files,
    storage_key,
)
from service.files.storage import FileStorage, iter_chunks, storage_for
from service.files.upload import UploadLimits, receive_upload
from service.store.models.files import StoredFile, parse_file_id
from service.store.settings import Settings
from service.web.deps import CurrentTenant, SessionDep, SettingsDep
from service.web.errors import APIError
from service.web.responses import TENANT_ROUTES, WITH_BODY, errors

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
UPLOAD_PURPOSES = ("batch",)
# The upload is read as a stream (upload.py), not through FastAPI's form parsing, so its
# multipart body is described here.
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"], "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": "The batch input: JSONL, one request per line."},
        "purpose": {"type": "string", "enum": list(UPLOAD_PURPOSES)},
        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
        "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2592000},
    }}}}}}


def file_storage(settings: Settings) -> FileStorage:
    return storage_for(settings.files_root)


@router.post("/files", openapi_extra=UPLOAD_BODY, responses=WITH_BODY)
async def upload_file(request: Request, tenant: CurrentTenant, session: SessionDep,
                      settings: SettingsDep) -> dict[str, Any]:
    storage = file_storage(settings)
    file_id = uuid.uuid4()
    key = storage_key(tenant.id, file_id)
    limits = UploadLimits(settings.batches.max_file_bytes, settings.batches.max_lines)
    upload = await receive_upload(request.headers.get("content-type", ""), request.stream(),
                                  storage=storage, key=key, limits=limits)
    try:
        purpose = upload.fields.get("purpose", "")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(400, f"purpose must be one of {list(UPLOAD_PURPOSES)}.",
                           code="invalid_value", param="purpose")
        expires_at = _expires_at(upload.fields)
        row = await add_file(session, file_id=file_id, tenant_id=tenant.id, purpose=purpose,
                             filename=upload.filename or "upload.jsonl", size=upload.bytes,
                             lines=upload.lines, key=key, expires_at=expires_at)
    except BaseException:
        storage.delete(key)
        raise
    return file_view(row)


@router.get("/files")
async def read_files(tenant: CurrentTenant, session: SessionDep,
                     purpose: str | None = None, after: str | None = None,
                     limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
                     order: str = "desc") -> dict[str, Any]:
    rows, more = await list_files(session, tenant_id=tenant.id, purpose=purpose,
                                  after=parse_file_id(after) if after else None, limit=limit,
                                  newest_first=order != "asc")
    data = [file_view(r) for r in rows]
    return {"object": "list", "data": data, "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


@router.get("/files/{file_id}", responses=errors(404))
async def read_file(file_id: str, tenant: CurrentTenant, session: SessionDep) -> dict[str, Any]:
    return file_view(await _owned(session, tenant.id, file_id))


@router.get("/files/{file_id}/content", response_class=StreamingResponse, responses={
    200: {"description": "The file's bytes.", "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
    **errors(404)})
async def read_file_content(file_id: str, tenant: CurrentTenant, session: SessionDep,
                            settings: SettingsDep) -> StreamingResponse:
    row = await _owned(session, tenant.id, file_id)
    try:
        reader = file_storage(settings).open_reader(row.storage_key)
    except FileNotFoundError as exc:
        raise APIError(404, f"The content of file '{file_id}' is gone.", code="not_found",
                       param="file_id") from exc
    # A sync generator: Starlette runs it in its thread pool, chunk by chunk.
    return StreamingResponse(iter_chunks(reader), media_type="application/octet-stream",
                             headers={"Content-Length": str(row.bytes)})


@router.delete("/files/{file_id}", responses=errors(404))
async def remove_file(file_id: str, tenant: CurrentTenant, session: SessionDep,
                      settings: SettingsDep) -> dict[str, Any]:
    row = await _owned(session, tenant.id, file_id)
    await delete_file(session, file_storage(settings), row=row)
    return {"id": row.public_id, "object": "file", "deleted": True}


async def _owned(session: SessionDep, tenant_id: uuid.UUID, file_id: str) -> StoredFile:
    parsed = parse_file_id(file_id)
    row = await get_file(session, file_id=parsed, tenant_id=tenant_id) if parsed else None
    if row is None:
        raise APIError(404, f"No such File object: {file_id}", code="not_found",
                       param="file_id")
    return row


def _expires_at(fields: dict[str, str]) -> dt.datetime | None:
    """`expires_after[anchor]=created_at` + `expires_after[seconds]` (enforced: expiry.py)."""
    seconds = fields.get("expires_after[seconds]")
    if not seconds:
        return None
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if fields.get("expires_after[anchor]", "created_at") != "created_at" or \
            not (seconds.isascii() and seconds.isdigit()) or \
            not 3600 <= int(seconds) <= 30 * 86400:
        raise APIError(400, "expires_after needs anchor 'created_at' and 3600-2592000 seconds.",
                       code="invalid_value", param="expires_after")
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=int(seconds))
