"""Admin API of the job and batch explorer: what an id names (GET /admin/search), a job's
detail and timeline (GET /admin/jobs/{id}) and a batch's detail (GET /admin/batches/{id}), each
by any id a user quotes (service.admin.explorer)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from service.admin import explorer
from service.web.deps import SessionDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, errors

# Mounted under /admin by service.admin.routes_views; needs the admin credential on its own too.
router = APIRouter(dependencies=[Depends(require_admin)], responses=ADMIN_ROUTES)

_COLLECTION = {"job": "jobs", "batch": "batches"}
ID_MAX = 256  # longer than any id Fairway makes or keeps (x-request-id: 128)


def _not_found(what: str, value: str, param: str) -> APIError:
    return APIError(404, f"No {what} matches {value!r}.", code="not_found", param=param)


@router.get("/search", responses=errors(404),
            description="What an id names: a job or a batch, and how it matched.")
async def search(session: SessionDep, q: str = Query(min_length=1, max_length=ID_MAX),
                 batch: str | None = Query(default=None, max_length=ID_MAX, description=(
                     "look q up as a custom_id among this batch's lines"))) -> dict[str, Any]:
    found = await explorer.resolve(session, q, batch=batch)
    if found is None and q.strip().startswith("req_"):
        # Requests that made no job (refused at the door, bad input) are in the logs only.
        raise APIError(404, f"No job or batch matches {q!r}: the request made no job (it was "
                       "refused or invalid?); `fairway logs --request-id "
                       f"{q.strip()}` shows what it did.", code="not_found", param="q")
    if found is None:
        raise _not_found("job or batch", q, "q")
    return {"object": "search_result", "query": q, "kind": found.kind,
            "id": found.public_id, "matched_as": found.matched_as,
            "url": f"/admin/{_COLLECTION[found.kind]}/{found.public_id}"}


@router.get("/jobs/{job_id}", responses=errors(404))
async def read_job(job_id: str, session: SessionDep) -> dict[str, Any]:
    """Any tenant's job by any of its ids, with its timeline and where its time went."""
    found = await explorer.resolve(session, job_id[:ID_MAX])
    detail = await explorer.job_detail(session, found.id) \
        if found is not None and found.kind == "job" else None
    if detail is None:
        raise _not_found("job", job_id[:ID_MAX], "job_id")
    return detail


@router.get("/batches/{batch_id}", responses=errors(404))
async def read_batch(batch_id: str, session: SessionDep) -> dict[str, Any]:
    """Any tenant's batch with its files, its lines by status, and its slowest and failed
    lines (each linking to its job)."""
    found = await explorer.resolve(session, batch_id[:ID_MAX])
    detail = await explorer.batch_detail(session, found.id) \
        if found is not None and found.kind == "batch" else None
    if detail is None:
        raise _not_found("batch", batch_id[:ID_MAX], "batch_id")
    return detail
