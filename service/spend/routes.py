"""Admin API: model prices, spend in money, its CSV export, and tenants' budgets
(docs/spend.md). Every change commits with its audit entry."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from service.admin import audit
from service.admin.tenant_ops import require_tenant
from service.spend import budgets, prices
from service.spend.schemas import BudgetSet, PriceSet
from service.spend.views import spend_csv, spend_view, window_lines
from service.store.models.spend import TenantBudget
from service.web.deps import AdminDep, SessionDep, SettingsDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, WITH_BODY, errors

MAX_WINDOW_DAYS = 366
router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                   responses=ADMIN_ROUTES)


@router.get("/prices")
async def list_prices(request: Request, session: SessionDep,
                      settings: SettingsDep) -> dict[str, Any]:
    """Every priced or served model: what each class pays now, or `unpriced` (costs 0)."""
    offered = await request.app.state.catalog.models()
    return {"object": "list", "currency": settings.spend.currency,
            "data": await prices.list_prices(session, offered)}


@router.put("/prices", responses=WITH_BODY)
async def set_price(body: PriceSet, actor: AdminDep, session: SessionDep) -> dict[str, Any]:
    """A new price version for the model, in force from now: jobs that ended before keep
    the price they ended under."""
    fields = body.model_dump(exclude={"model"})
    row = await prices.add_version(session, model=body.model, actor=actor, fields=fields)
    audit.record(session, actor=actor, action="price.set", target_type="model",
                 target_id=body.model[:64], details={k: str(v) if v is not None else None
                                                     for k, v in fields.items()})
    await session.commit()
    return prices.price_view(row, body.model)


@router.delete("/prices", responses=errors(404))
async def unprice(actor: AdminDep, session: SessionDep,
                  model: str = Query(min_length=1, max_length=256)) -> dict[str, Any]:
    """The model costs nothing from now (reported as unpriced); history is kept."""
    current = (await prices.current_prices(session)).get(model)
    if current is None or current.input_per_mtok is None:
        raise APIError(404, f"The model '{model}' has no price.", code="not_found",
                       param="model")
    row = await prices.add_version(session, model=model, actor=actor, fields=None)
    audit.record(session, actor=actor, action="price.unprice", target_type="model",
                 target_id=model[:64])
    await session.commit()
    return prices.price_view(row, model)


@router.get("/prices/history")
async def price_history(session: SessionDep,
                        model: str = Query(min_length=1, max_length=256)) -> dict[str, Any]:
    """Every version of the model's prices, newest first."""
    return {"object": "list", "model": model,
            "data": await prices.price_history(session, model)}


def _window(since: dt.date | None, until: dt.date | None) -> tuple[dt.date, dt.date]:
    today = dt.datetime.now(dt.UTC).date()
    until = until or today
    since = since or until.replace(day=1)
    if since > until:
        raise APIError(400, "since must not be after until.", code="invalid_value",
                       param="since")
    if (until - since).days >= MAX_WINDOW_DAYS:
        raise APIError(400, f"The window is at most {MAX_WINDOW_DAYS} days.",
                       code="invalid_value", param="since")
    return since, until


def _tenant_uuid(tenant_id: str | None) -> uuid.UUID | None:
    if tenant_id is None:
        return None
    try:
        return uuid.UUID(tenant_id)
    except ValueError:
        raise APIError(400, "tenant_id is not a tenant id.", code="invalid_value",
                       param="tenant_id") from None


@router.get("/spend")
async def spend(session: SessionDep, settings: SettingsDep, since: dt.date | None = None,
                until: dt.date | None = None, tenant_id: str | None = None,
                group_by: Literal["tenant", "key", "model", "job_class", "day"] = "tenant"
                ) -> dict[str, Any]:
    """Spend of jobs that ended on the UTC days since..until (default: this month so far),
    summed by `group_by`, each job at the price in force when it ended."""
    first, last = _window(since, until)
    lines = await window_lines(session, since=first, until=last,
                               tenant_id=_tenant_uuid(tenant_id))
    return await spend_view(session, lines, by=group_by, since=first, until=last,
                            currency=settings.spend.currency)


@router.get("/spend/export.csv", response_class=Response,
            responses={200: {"content": {"text/csv": {}}}})
async def export_spend(session: SessionDep, settings: SettingsDep, since: dt.date | None = None,
                       until: dt.date | None = None, tenant_id: str | None = None) -> Response:
    """One row per UTC day, tenant, key, model and price class."""
    first, last = _window(since, until)
    lines = await window_lines(session, since=first, until=last,
                               tenant_id=_tenant_uuid(tenant_id))
    name = f"fairway-spend-{first.isoformat()}-{last.isoformat()}.csv"
    return Response(await spend_csv(session, lines, currency=settings.spend.currency),
                    media_type="text/csv; charset=utf-8",
                    headers={"content-disposition": f'attachment; filename="{name}"'})


@router.get("/tenants/{tenant_id}/budget", responses=errors(404))
async def read_budget(tenant_id: str, session: SessionDep,
                      settings: SettingsDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    return await budgets.budget_view(session, tenant.id, currency=settings.spend.currency)


@router.put("/tenants/{tenant_id}/budget", responses={**errors(404), **WITH_BODY})
async def set_budget(tenant_id: str, body: BudgetSet, actor: AdminDep, session: SessionDep,
                     settings: SettingsDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    await budgets.set_budget(session, tenant.id, monthly_limit=body.monthly_limit,
                             thresholds=body.thresholds, hard_stop=body.hard_stop)
    audit.record(session, actor=actor, action="budget.set", target_type="tenant",
                 target_id=str(tenant.id),
                 details={"monthly_limit": str(body.monthly_limit),
                          "thresholds": sorted(set(body.thresholds)),
                          "hard_stop": body.hard_stop})
    await session.commit()
    return await budgets.budget_view(session, tenant.id, currency=settings.spend.currency)


@router.delete("/tenants/{tenant_id}/budget", responses=errors(404))
async def delete_budget(tenant_id: str, actor: AdminDep, session: SessionDep,
                        settings: SettingsDep) -> dict[str, Any]:
    """No budget: no alerts, no stop (alerts sent stay recorded)."""
    tenant = await require_tenant(session, tenant_id)
    budget = await session.get(TenantBudget, tenant.id)
    if budget is None:
        raise APIError(404, "This tenant has no budget.", code="not_found")
    await session.delete(budget)
    audit.record(session, actor=actor, action="budget.delete", target_type="tenant",
                 target_id=str(tenant.id))
    await session.commit()
    return await budgets.budget_view(session, tenant.id, currency=settings.spend.currency)
