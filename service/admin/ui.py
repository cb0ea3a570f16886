"""Serves the admin dashboard (dashboards/admin/): static files, no secrets in them.

The page carries no data; its script asks the admin API with the token the admin pastes in,
so serving the page itself needs no credential.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from service.web.errors import APIError

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "admin"
_FILES = {"app.js": "text/javascript", "style.css": "text/css", "charts.js": "text/javascript"}
# The page and its script come only from here; the API it calls is same-origin.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'")

router = APIRouter(prefix="/admin/ui", include_in_schema=False)


@router.get("")
async def ui_root() -> RedirectResponse:
    return RedirectResponse("/admin/ui/")


@router.get("/")
async def ui_index() -> FileResponse:
    return FileResponse(DASHBOARD_DIR / "index.html", media_type="text/html",
                        headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-store"})


@router.get("/{name}")
async def ui_asset(name: str) -> FileResponse:
    if name not in _FILES:  # a fixed list: no path from the URL reaches the filesystem
        raise APIError(404, "Not found.", code="not_found")
    return FileResponse(DASHBOARD_DIR / name, media_type=_FILES[name],
                        headers={"Cache-Control": "no-store"})
