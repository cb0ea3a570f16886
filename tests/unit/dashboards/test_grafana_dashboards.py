"""Every Grafana panel queries metrics Fairway exports (no dead panels), and the provisioning
and scrape config point at what compose.yaml mounts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from service.store.telemetry.metrics import exported_metric_names

GRAFANA = Path(__file__).resolve().parents[3] / "dashboards" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
# Metric names in PromQL: ours all start with vllm:, fairway_ or process_.
METRIC = re.compile(r"(?<![\w:])((?:vllm:|fairway_|process_)[A-Za-z0-9_:]*)")


def _panels(items: list[dict]) -> list[dict]:
    out = []
    for item in items:
        out.append(item)
        out += _panels(item.get("panels", []))  # rows
    return out


def test_the_four_dashboards_exist():
    assert {p.name for p in DASHBOARDS} == {"fleet-overview.json", "tenant-slos.json",
                                           "batch-progress.json", "scheduler.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_queries_exported_metrics(path: Path):
    exported = exported_metric_names()
    board = json.loads(path.read_text())
    panels = [p for p in _panels(board["panels"]) if p.get("type") != "row"]
    assert panels, f"{path.name} has no panels"
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = METRIC.findall(target["expr"])
            assert names, f"{panel['title']!r}: no Fairway metric in {target['expr']!r}"
            unknown = sorted(set(names) - exported)
            assert not unknown, f"{panel['title']!r} queries unexported {unknown}"
    for var in board.get("templating", {}).get("list", []):
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert set(METRIC.findall(query)) <= exported, var["name"]


def test_provisioning_and_scrape_config():
    datasource = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    for path in DASHBOARDS:
        for panel in _panels(json.loads(path.read_text())["panels"]):
            assert panel["datasource"]["uid"] == uid
    scrape = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in scrape["scrape_configs"]}
    assert jobs == {"fairway-api", "fairway-scheduler", "fairway-worker"}
