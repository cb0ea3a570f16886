"""Serves the admin dashboard (dashboards/admin/): static files, no secrets in them, and the
site's /favicon.ico.

The page carries no data; its scripts ask the admin API with the token the admin pastes in,
so serving the page itself needs no credential. No build step: the scripts are ES modules
and the libraries are vendored (dashboards/admin/vendor/README.md).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from service.web.errors import APIError

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "admin"
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
          ".ico": "image/x-icon", ".svg": "image/svg+xml"}
# The page and its scripts come only from here; the API it calls is same-origin. Styles set
# from script (Preact's and uPlot's element.style) are not inline style attributes.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def _asset_table(root: Path) -> dict[str, tuple[Path, str]]:
    """Every servable file, by its path relative to the dashboard folder, read once: no path
    from a URL reaches the filesystem, only a key of this table does."""
    return {p.relative_to(root).as_posix(): (p, _TYPES[p.suffix])
            for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in _TYPES}


_ASSETS = _asset_table(DASHBOARD_DIR)

router = APIRouter(include_in_schema=False)


@router.get("/admin/ui")
async def ui_root() -> RedirectResponse:
    return RedirectResponse("/admin/ui/")


@router.get("/admin/ui/")
async def ui_index() -> FileResponse:
    return FileResponse(DASHBOARD_DIR / "index.html", media_type="text/html",
                        headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-store"})


@router.get("/admin/ui/{name:path}")
async def ui_asset(name: str) -> FileResponse:
    found = _ASSETS.get(name)
    if found is None:
        raise APIError(404, "Not found.", code="not_found")
    path, media_type = found
    # Vendored files never change under a version; the app's own files may with any deploy.
    cache = "public, max-age=86400" if name.startswith("vendor/") else "no-store"
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": cache})


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    return FileResponse(DASHBOARD_DIR / "favicon.ico", media_type="image/x-icon",
                        headers={"Cache-Control": "public, max-age=86400"})
