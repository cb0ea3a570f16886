"""What a request's ``model`` runs on: a base model as named, or for the caller's own
adapter (``ft:<base>:<tenant>:<name>``) its base model, which places the job on that
model's workers; the worker reads the adapter from the request's ``model`` (worker.adapters).
"""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.adapters.records import resolve_ft_model
from service.store.adapter_names import is_ft_name
from service.store.models.tenants import Tenant
from service.web.errors import APIError


async def served_model(request: Request, session: AsyncSession, tenant: Tenant,
                       model: str) -> str:
    """The base model a request for ``model`` runs on. An ``ft:`` name that is not one of the
    tenant's live adapters is a 404 like any unknown model (another tenant's included)."""
    if not is_ft_name(model):
        return model
    row = await resolve_ft_model(session, tenant, model)
    if row is None or not await request.app.state.catalog.has(row.base_model):
        raise APIError(404, f"The model '{model}' does not exist.", code="model_not_found",
                       param="model")
    return row.base_model
