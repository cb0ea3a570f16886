"""Usage and limits, for tenants with their own key and for the admin (docs/usage.md).

- ``GET /v1/organization/usage/completions``: OpenAI's Usage API, scoped to the caller's
  tenant (the key decides the tenant; no parameter can widen it).
- ``GET /v1/limits``: the caller's plan, rate limits, concurrency and monthly budget.
- ``GET /admin/usage/completions`` and ``GET /admin/usage.csv``: the same for every tenant
  (or the ones ``tenant_id`` names), with a tenant column.

``format=csv`` answers a CSV of the whole range instead of a page of JSON.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from service.api.usage_params import bad_param, one_value, usage_query, uuid_list
from service.usage.buckets import WIDTHS, ceil_to, floor_to
from service.usage.completions import ADMIN_GROUP_FIELDS, UsageQuery, usage_page
from service.usage.tenant_limits import tenant_limits
from service.usage.usage_csv import usage_csv
from service.web.deps import CurrentTenant, RedisDep, SessionDep, require_admin
from service.web.responses import ADMIN_ROUTES, TENANT_ROUTES

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
admin_router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                         responses=ADMIN_ROUTES)

_USAGE_DOC = ("Buckets of `bucket_width` (1m, 1h, 1d) from `start_time` (unix seconds, required) "
              "to `end_time`, grouped by `group_by`, filtered by `models`, `api_key_ids`, "
              "`batch`; `limit` buckets a page, `page` the previous answer's `next_page`. "
              "`format=csv` for a CSV of the whole range.")


def _param(name: str, schema: dict[str, Any], what: str, *, required: bool = False
           ) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": what}


_LIST = {"type": "array", "items": {"type": "string"}}
# Read from the query string by service.api.usage_params (it takes OpenAI's list forms, which
# FastAPI's own parsing does not); listed here so the OpenAPI document shows them.
_PARAMS = [
    _param("start_time", {"type": "integer"}, "Unix seconds, inclusive.", required=True),
    _param("end_time", {"type": "integer"}, "Unix seconds, exclusive; default now."),
    _param("bucket_width", {"type": "string", "enum": list(WIDTHS)}, "Default 1d."),
    _param("limit", {"type": "integer"}, "Buckets a page: 1d 7 (at most 31), 1h 24 (168), "
                                         "1m 60 (1440)."),
    _param("page", {"type": "string"}, "The previous page's next_page."),
    _param("group_by", _LIST, "model, api_key_id, batch, service_tier, project_id, user_id."),
    _param("models", _LIST, "Only these models."),
    _param("api_key_ids", _LIST, "Only these keys."),
    _param("batch", {"type": "boolean"}, "true: batch lines only; false: none."),
    _param("format", {"type": "string", "enum": ["json", "csv"]}, "Default json."),
]
_WITH_CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/json": {}, "text/csv": {}}}}
_CSV_ONLY: dict[int | str, dict[str, Any]] = {200: {"content": {"text/csv": {}}}}


def _wants_csv(request: Request) -> bool:
    fmt = one_value(request.query_params, "format") or "json"
    if fmt not in ("json", "csv"):
        raise bad_param("format", f"Invalid 'format': '{fmt[:40]}' is not one of json, csv.")
    return fmt == "csv"


def _whole_range(query: UsageQuery, request: Request) -> int:
    """A CSV is the whole range in one answer: as many buckets as a page may hold at most."""
    for name in ("page", "limit"):
        if one_value(request.query_params, name) is not None:
            raise bad_param(name, f"'{name}' does not apply to format=csv: the CSV covers "
                                  "start_time to end_time whole.")
    rule = WIDTHS[query.bucket_width]
    buckets = (ceil_to(query.end_time, rule.seconds)
               - floor_to(query.start_time, rule.seconds)) // rule.seconds
    if buckets > rule.max_limit:
        raise bad_param("end_time", f"A CSV holds at most {rule.max_limit} buckets of width "
                                    f"{query.bucket_width}; this range has {buckets}. Narrow "
                                    "start_time..end_time or use a wider bucket_width.")
    return buckets


def _csv(page: dict[str, Any], group_by: tuple[str, ...], name: str) -> Response:
    return Response(usage_csv(page, group_by), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/organization/usage/completions", description=_USAGE_DOC, responses=_WITH_CSV,
            openapi_extra={"parameters": _PARAMS})
async def completions_usage(request: Request, tenant: CurrentTenant, session: SessionDep
                            ) -> Any:
    query = usage_query(request.query_params)
    if _wants_csv(request):
        buckets = _whole_range(query, request)
        page = await usage_page(session, query, tenant_id=tenant.id, max_buckets=buckets)
        return _csv(page, query.group_by, "usage.csv")
    return await usage_page(session, query, tenant_id=tenant.id)


@router.get("/limits", description="The caller's plan, rate limits and what is left of them, "
                                   "open requests, and the month's token budget.")
async def own_limits(tenant: CurrentTenant, session: SessionDep, redis: RedisDep
                     ) -> dict[str, Any]:
    return await tenant_limits(session, redis, tenant)


def _admin_query(request: Request, *, tenant_column: bool) -> UsageQuery:
    query = usage_query(request.query_params, group_fields=ADMIN_GROUP_FIELDS)
    group_by = query.group_by
    if tenant_column and "tenant_id" not in group_by:
        group_by = ("tenant_id", *group_by)
    return dataclasses.replace(query, group_by=group_by,
                               tenant_ids=uuid_list(request.query_params, "tenant_id"))


_ADMIN_PARAMS = [*_PARAMS, _param("tenant_id", _LIST, "Only these tenants.")]


@admin_router.get("/usage/completions", description=_USAGE_DOC + " Every tenant unless "
                  "`tenant_id` names some; `group_by=tenant_id` adds the tenant.",
                  responses=_WITH_CSV, openapi_extra={"parameters": _ADMIN_PARAMS})
async def admin_completions_usage(request: Request, session: SessionDep) -> Any:
    query = _admin_query(request, tenant_column=False)
    if _wants_csv(request):
        page = await usage_page(session, query, tenant_id=None,
                                max_buckets=_whole_range(query, request))
        return _csv(page, query.group_by, "usage.csv")
    return await usage_page(session, query, tenant_id=None)


@admin_router.get("/usage.csv", response_class=Response, description="Usage of every tenant as "
                  "CSV, one row per bucket, tenant and group: the parameters of "
                  "/admin/usage/completions.",
                  responses=_CSV_ONLY,
                  openapi_extra={"parameters": [p for p in _ADMIN_PARAMS
                                                if p["name"] not in ("page", "limit", "format")]})
async def admin_usage_csv(request: Request, session: SessionDep) -> Response:
    query = _admin_query(request, tenant_column=True)
    page = await usage_page(session, query, tenant_id=None,
                            max_buckets=_whole_range(query, request))
    return _csv(page, query.group_by, "fairway-usage.csv")
