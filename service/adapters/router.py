"""The adapters API: upload, list, retrieve and delete a tenant's LoRA adapters.

Each route sees only the caller's own adapters: another tenant's looks exactly like a missing
one (404), as files do. An adapter is addressed by its id (``lora-...``) or by its model name
(``ft:<base>:<tenant>:<name>``).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.adapters.records import (
    NameTaken,
    adapter_storage_key,
    adapter_view,
    add_adapter,
    get_adapter,
    list_adapters,
    mark_deleted,
    resolve_ft_model,
)
from service.adapters.upload import AcceptedAdapter, accept_upload, delete_stored
from service.files.storage import FileStorage, storage_for
from service.store.adapter_names import is_ft_name
from service.store.models.adapters import LoraAdapter, parse_adapter_id
from service.store.models.tenants import Tenant
from service.web.deps import CurrentTenant, SessionDep, SettingsDep
from service.web.errors import APIError
from service.web.responses import TENANT_ROUTES, WITH_BODY, errors

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
# Read as a stream (service.files.upload), not through FastAPI's form parsing.
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "name", "model"], "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": "A zip or tar of the folder PEFT's save_pretrained writes: "
                                "adapter_config.json and adapter_model.safetensors."},
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
        "model": {"type": "string", "description": "The base model the adapter was trained "
                                                   "on: one this deployment serves."},
    }}}}}}


@router.post("/adapters", openapi_extra=UPLOAD_BODY, responses={**WITH_BODY, **errors(409)})
async def upload_adapter(request: Request, tenant: CurrentTenant, session: SessionDep,
                         settings: SettingsDep) -> dict[str, Any]:
    storage = storage_for(settings.files_root)
    adapter_id = uuid.uuid4()
    key = adapter_storage_key(tenant.id, adapter_id)
    accepted = await accept_upload(request.headers.get("content-type", ""), request.stream(),
                                   settings=settings.adapters, storage=storage, key=key,
                                   is_served=request.app.state.catalog.has)
    row = await insert_adapter(session, adapter_id=adapter_id, tenant=tenant, key=key,
                               accepted=accepted, storage=storage)
    return adapter_view(row, tenant.name)


async def insert_adapter(session: AsyncSession, *, adapter_id: uuid.UUID, tenant: Tenant,
                         key: str, accepted: AcceptedAdapter,
                         storage: FileStorage) -> LoraAdapter:
    """The accepted adapter's row (and whatever the session holds besides, such as an audit
    entry); its stored files go again if the row cannot be written."""
    row = LoraAdapter(id=adapter_id, tenant_id=tenant.id, name=accepted.name,
                      base_model=accepted.base_model, rank=accepted.info.rank,
                      target_modules=list(accepted.info.target_modules),
                      bytes=accepted.bytes, storage_key=key)
    try:
        return await add_adapter(session, row)
    except BaseException as exc:
        delete_stored(storage, key)
        if isinstance(exc, NameTaken):
            raise APIError(409, f"An adapter named '{accepted.name}' on "
                                f"'{accepted.base_model}' exists; delete it first.",
                           code="adapter_exists", param="name") from exc
        raise


@router.get("/adapters")
async def read_adapters(tenant: CurrentTenant, session: SessionDep) -> dict[str, Any]:
    rows = await list_adapters(session, tenant_id=tenant.id)
    return {"object": "list", "data": [adapter_view(r, tenant.name) for r in rows]}


@router.get("/adapters/{adapter_id:path}", responses=errors(404))
async def read_adapter(adapter_id: str, tenant: CurrentTenant,
                       session: SessionDep) -> dict[str, Any]:
    return adapter_view(await _owned(session, tenant, adapter_id), tenant.name)


@router.delete("/adapters/{adapter_id:path}", responses=errors(404))
async def remove_adapter(adapter_id: str, tenant: CurrentTenant, session: SessionDep,
                         settings: SettingsDep) -> dict[str, Any]:
    row = await _owned(session, tenant, adapter_id)
    await mark_deleted(session, row)
    # Row first: once it is marked nobody can name the adapter, so a crash in between only
    # leaves orphan bytes, never a live adapter without its files.
    delete_stored(storage_for(settings.files_root), row.storage_key)
    return {"id": row.public_id, "object": "lora_adapter", "deleted": True}


async def _owned(session: SessionDep, tenant: Tenant, adapter_id: str) -> LoraAdapter:
    row: LoraAdapter | None = None
    if is_ft_name(adapter_id):
        row = await resolve_ft_model(session, tenant, adapter_id)
    elif (parsed := parse_adapter_id(adapter_id)) is not None:
        row = await get_adapter(session, adapter_id=parsed, tenant_id=tenant.id)
    if row is None:
        raise APIError(404, f"No such adapter: {adapter_id}", code="not_found",
                       param="adapter_id")
    return row
