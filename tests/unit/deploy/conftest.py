"""Renders the Helm chart offline (helm-python-sdk: Helm as a library, no binary, no
cluster) for the tests beside this file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "fairway"


def _import_helm() -> Any:
    try:
        import helm_python
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("helm-python-sdk is missing in CI: it is in the dev extra "
                        "(pyproject.toml), which .ci/install.sh installs")
        pytest.skip("helm-python-sdk not installed (pip install -e '.[dev]')")
    return helm_python


@pytest.fixture(scope="session")
def helm() -> Any:
    return _import_helm()


@pytest.fixture(scope="session")
def chart(helm: Any) -> Any:
    return helm.Chart.load(str(CHART))


Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def render(chart: Any) -> Render:
    """Render with these values (over the chart's defaults) to the list of manifests."""

    def _render(values: dict[str, Any] | None = None, *, upgrade: bool = False,
                release: str = "fw") -> list[dict[str, Any]]:
        out = chart.render(values or {}, name=release, namespace="fairway",
                           is_install=not upgrade, is_upgrade=upgrade)
        docs: list[dict[str, Any]] = []
        for path, text in sorted(out.items()):
            if path.endswith("NOTES.txt"):
                continue
            docs += [doc for doc in yaml.safe_load_all(text) if doc]
        return docs

    return _render
