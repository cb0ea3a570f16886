"""The admin dashboard's files: every import resolves to a served file (no build step, no
registry at runtime), the vendored libraries keep their licences and recorded versions, and
the server's table of files is the only way from a URL to the disk."""

from __future__ import annotations

import json
import re
from pathlib import Path

from service.admin.ui import _ASSETS, DASHBOARD_DIR, _asset_table

IMPORT = re.compile(r"""(?:import|export)[^"';]*?from\s*["']([^"']+)["']""")


def _modules() -> list[Path]:
    return [p for p in DASHBOARD_DIR.rglob("*") if p.suffix in (".js", ".mjs")]


def test_every_import_is_a_relative_served_file():
    for module in _modules():
        for spec in IMPORT.findall(module.read_text()):
            assert spec.startswith("./") or spec.startswith("../"), (module, spec)
            target = (module.parent / spec).resolve()
            rel = target.relative_to(DASHBOARD_DIR).as_posix()
            assert rel in _ASSETS, (module, spec)


def test_index_loads_only_served_files():
    html = (DASHBOARD_DIR / "index.html").read_text()
    for url in re.findall(r'(?:src|href)="(/admin/ui/[^"]+)"', html):
        assert url.removeprefix("/admin/ui/") in _ASSETS, url
    assert "favicon.ico" in _ASSETS


def test_vendored_libraries_keep_licences_and_versions():
    vendor = DASHBOARD_DIR / "vendor"
    readme = (vendor / "README.md").read_text()
    for lib, version in (("preact", "11.2.0"), ("htm", "3.1.1"), ("uplot", "1.6.32")):
        assert (vendor / f"LICENSE.{lib}").stat().st_size > 500
        assert f"| {lib} | {version} |" in readme
    assert 'from"./preact.mjs"' in (vendor / "preact-hooks.mjs").read_text()


def test_asset_table_holds_only_known_types(tmp_path: Path):
    (tmp_path / "a.js").write_text("x")
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.css").write_text("x")
    table = _asset_table(tmp_path)
    assert set(table) == {"a.js", "sub/b.css"}
    assert table["a.js"][1] == "text/javascript"
    assert json.dumps(sorted(table))  # plain keys: no "..", no absolute paths
    assert not any(k.startswith("/") or ".." in k for k in _ASSETS)
