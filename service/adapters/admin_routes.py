"""An admin registers a tenant's adapter from a folder on the API's host (one under
``FAIRWAY_ADAPTER_IMPORT_DIR``; unset: registration by path is off) or from an http(s) URL
of an archive (service.adapters.fetch_url), checked exactly as an upload is, copied into file
storage, and audited. For adapters trained next to the deployment or kept in an object store,
too large or too many to send through the API one by one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from service.adapters.fetch_url import redacted_url
from service.adapters.records import adapter_storage_key, adapter_view
from service.adapters.router import insert_adapter
from service.adapters.upload import accept_folder, accept_url
from service.admin.audit import record
from service.admin.tenant_ops import require_tenant
from service.files.storage import storage_for
from service.web.deps import AdminDep, SessionDep, SettingsDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, WITH_BODY, errors

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                   responses=ADMIN_ROUTES)


class AdapterRegistration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the adapter's name (a-z, 0-9, '.', '_', '-')")
    model: str = Field(description="the base model it was trained on, one served here")
    path: str | None = Field(default=None, description="its folder, relative to "
                                                       "FAIRWAY_ADAPTER_IMPORT_DIR")
    url: str | None = Field(default=None, description="or an http(s) URL of its archive (a zip "
                                                      "or tar, as an upload)")


@router.post("/tenants/{tenant_id}/adapters", status_code=201,
             responses={**errors(404, 409), **WITH_BODY})
async def register_adapter(tenant_id: str, body: AdapterRegistration, request: Request,
                           actor: AdminDep, session: SessionDep,
                           settings: SettingsDep) -> dict[str, Any]:
    if (body.path is None) == (body.url is None):
        raise APIError(400, "Give exactly one of path and url.", code="invalid_value",
                       param="url" if body.url is not None else "path")
    tenant = await require_tenant(session, tenant_id)
    storage = storage_for(settings.files_root)
    adapter_id = uuid.uuid4()
    key = adapter_storage_key(tenant.id, adapter_id)
    is_served = request.app.state.catalog.has
    if body.url is not None:
        accepted = await accept_url(body.url, name=body.name, base=body.model,
                                    settings=settings.adapters, storage=storage, key=key,
                                    is_served=is_served)
        source = {"url": redacted_url(body.url)}  # a presigned URL's query is a credential
    else:
        folder = import_folder(settings.adapters.adapter_import_dir, body.path or "")
        accepted = await accept_folder(folder, name=body.name, base=body.model,
                                       settings=settings.adapters, storage=storage, key=key,
                                       is_served=is_served)
        source = {"path": body.path or ""}
    record(session, actor=actor, action="adapter.register", target_type="tenant",
           target_id=str(tenant.id), details={"adapter": "lora-" + adapter_id.hex,
                                              "name": body.name, "model": body.model,
                                              **source})
    row = await insert_adapter(session, adapter_id=adapter_id, tenant=tenant, key=key,
                               accepted=accepted, storage=storage)
    return adapter_view(row, tenant.name)


def import_folder(root: Path | None, relative: str) -> Path:
    """``relative`` under ``root``, refused if it leaves it (``..``, a link out, absolute)."""
    if root is None:
        raise APIError(400, "Registering adapters by path is off: set "
                            "FAIRWAY_ADAPTER_IMPORT_DIR.", code="invalid_value", param="path")
    base = root.resolve()
    folder = (base / relative).resolve()
    if not folder.is_relative_to(base) or not folder.is_dir():
        raise APIError(400, f"path must be a folder under the import directory, got "
                            f"{relative!r}.", code="invalid_value", param="path")
    return folder
