"""OpenAI's models routes: ``GET /v1/models`` and ``GET /v1/models/{model}``.

``created`` is when this deployment first offered the model (service.web.catalog), not the
model's release date, which Fairway cannot know. Model names may contain ``/`` (Hugging Face
ids such as ``HuggingFaceTB/SmolLM2-135M-Instruct``); the SDK sends it as ``%2F``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.adapters.records import adapter_model, list_adapters, resolve_ft_model
from service.quotas.key_limits import key_policy_of
from service.web.deps import CurrentTenant, SessionDep
from service.web.errors import APIError
from service.web.responses import TENANT_ROUTES, errors

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)


def _model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "fairway"}


@router.get("/models")
async def list_models(request: Request, tenant: CurrentTenant, session: SessionDep
                      ) -> dict[str, Any]:
    catalog = request.app.state.catalog
    names = await catalog.models()
    created = await catalog.created(session, names)
    data = [_model(n, created[n]) for n in names if n in created]
    # The caller's own adapters on the models served here (no one else's).
    data += [adapter_model(row, tenant.name) for row in await list_adapters(
        session, tenant_id=tenant.id) if row.base_model in created]
    policy = key_policy_of(request)  # a key with an allow-list sees only those models
    return {"object": "list", "data": [m for m in data if policy.allows(m["id"])]}


@router.get("/models/{model:path}", responses=errors(404))
async def retrieve_model(model: str, request: Request, tenant: CurrentTenant,
                         session: SessionDep) -> dict[str, Any]:
    catalog = request.app.state.catalog
    if not key_policy_of(request).allows(model):
        raise APIError(404, f"The model '{model}' does not exist or you do not have access "
                            f"to it.", code="model_not_found", param="model")
    if (adapter := await resolve_ft_model(session, tenant, model)) is not None:
        return adapter_model(adapter, tenant.name)
    if not await catalog.has(model):
        raise APIError(404, f"The model '{model}' does not exist or you do not have access "
                            f"to it.", code="model_not_found", param="model")
    created = await catalog.created(session, [model])
    return _model(model, created[model])
