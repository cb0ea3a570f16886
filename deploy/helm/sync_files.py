"""Copy the alert rules and the Grafana dashboards into the chart.

dashboards/grafana/ is their one source (generated there by dashboards/grafana/generate.py).
Helm reads only files inside the chart's directory, and a symlink out of it does not survive
`helm package`, so the chart carries byte-for-byte copies under files/; run this after
regenerating them. tests/unit/deploy/ fails while a copy differs from its source.

    python deploy/helm/sync_files.py            # copy
    python deploy/helm/sync_files.py --check    # exit 1 and name the stale copies
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
CHART_FILES = Path(__file__).resolve().parent / "fairway" / "files"


def pairs() -> dict[Path, Path]:
    """Each chart copy and its source."""
    found = {CHART_FILES / "alerts.yml": GRAFANA / "alerts.yml"}
    for source in sorted((GRAFANA / "dashboards").glob("*.json")):
        found[CHART_FILES / "dashboards" / source.name] = source
    return found


def stale() -> list[str]:
    """The chart copies that differ from their source, are missing, or have none."""
    expected = pairs()
    problems = [f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}"
                for copy, source in expected.items()
                if not copy.is_file() or copy.read_bytes() != source.read_bytes()]
    problems += [f"{extra.relative_to(ROOT)} has no source in dashboards/grafana/dashboards/"
                 for extra in sorted((CHART_FILES / "dashboards").glob("*.json"))
                 if extra not in expected]
    return problems


def sync() -> None:
    expected = pairs()
    (CHART_FILES / "dashboards").mkdir(parents=True, exist_ok=True)
    for extra in (CHART_FILES / "dashboards").glob("*.json"):
        if extra not in expected:
            extra.unlink()
    for copy, source in expected.items():
        shutil.copyfile(source, copy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale copies")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
