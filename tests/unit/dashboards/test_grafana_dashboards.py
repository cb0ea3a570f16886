"""The Grafana dashboards and the alert rules tell the truth: every query names metrics and
labels Fairway exports (parsed as PromQL, checked against the registry), label values are
ones the code writes, the generated files are fresh, and the panels the issue asked for are
there. The provisioning and scrape config point at what compose.yaml mounts."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from service.store.telemetry.labels import JOB_CLASSES, TIERS
from service.store.telemetry.metrics import REGISTRY
from service.store.telemetry.slo_rules import KINDS
from tests.support.promql import TARGET_LABELS, Selector, exported_labels, selectors

ROOT = Path(__file__).resolve().parents[3]
GRAFANA = ROOT / "dashboards" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
ALERTS = GRAFANA / "alerts.yml"
# Label values the code writes, for the labels whose values the queries pick by name.
VALUES = {"class": JOB_CLASSES, "tier": TIERS, "kind": frozenset(KINDS),
          "outcome": frozenset({"met", "missed"})}


def _panels(items: list[dict]) -> list[dict]:
    out = []
    for item in items:
        out.append(item)
        out += _panels(item.get("panels", []))  # rows
    return out


def _board(name: str) -> dict:
    return json.loads((GRAFANA / "dashboards" / name).read_text())


def _exprs() -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every dashboard query and every rule."""
    for path in DASHBOARDS:
        for panel in _panels(json.loads(path.read_text())["panels"]):
            for target in panel.get("targets", []):
                yield f"{path.name}: {panel['title']}", target["expr"]
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            yield f"alerts.yml: {rule.get('alert') or rule.get('record')}", rule["expr"]


def _values(op: str, value: str) -> set[str]:
    """The values a matcher accepts, when it lists them (a|b|c); empty for patterns."""
    if op == "=":
        return {value}
    if op == "=~" and all(c.isalnum() or c in "_|" for c in value):
        return set(value.split("|"))
    return set()


def test_the_four_dashboards_exist():
    assert {p.name for p in DASHBOARDS} == {"fleet-overview.json", "tenant-slos.json",
                                           "batch-progress.json", "scheduler.json"}


def test_generated_files_are_fresh():
    sys.path.insert(0, str(GRAFANA))
    try:
        generate = importlib.import_module("generate")
    finally:
        sys.path.remove(str(GRAFANA))
    for path, text in generate.rendered().items():
        assert path.read_text() == text, (
            f"{path.name} is stale: run python dashboards/grafana/generate.py")


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_has_queries_and_a_unique_id(path: Path):
    board = json.loads(path.read_text())
    panels = [p for p in _panels(board["panels"]) if p.get("type") != "row"]
    assert panels, f"{path.name} has no panels"
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"


def test_every_query_names_exported_metrics_labels_and_values():
    exported = exported_labels(REGISTRY)
    checked = 0
    for where, expr in _exprs():
        found = selectors(expr)
        assert found, f"{where}: no metric in {expr!r}"
        for sel in found:
            assert sel.name in exported, f"{where}: {sel.name!r} is not exported"
            for label, op, value in sel.matchers:
                assert label in exported[sel.name] | TARGET_LABELS, (
                    f"{where}: {sel.name} has no label {label!r}")
                unknown = _values(op, value) - VALUES.get(label, _values(op, value))
                assert not unknown, f"{where}: {label} is never {sorted(unknown)}"
            checked += 1
    assert checked > 50


def test_the_checker_catches_what_it_should():
    exported = exported_labels(REGISTRY)
    assert "fairway_slo_requests_total" in exported
    assert "kind" in exported["fairway_slo_requests_total"]
    assert "le" in exported["vllm:time_to_first_token_seconds_bucket"]
    assert "le" not in exported["vllm:time_to_first_token_seconds_count"]
    assert {"class", "kind", "window"} <= exported["fairway_slo_attainment_ratio"]
    found = selectors('sum(rate(x_total{a="1",b=~"p|q"}[$__rate_interval])) / on (c) '
                      'absent(y) and z offset 5m')
    assert found == [Selector("x_total", (("a", "=", "1"), ("b", "=~", "p|q"))),
                     Selector("y", ()), Selector("z", ())]
    assert _values("=~", "ttft|tpot") == {"ttft", "tpot"} and not _values("=~", ".*")


def _selectors_of(board: str, title_part: str) -> list[Selector]:
    panels = [p for p in _panels(_board(board)["panels"]) if title_part in p["title"]]
    assert panels, f"no panel with {title_part!r} in {board}"
    return [s for p in panels for t in p["targets"] for s in selectors(t["expr"])]


def test_fleet_latency_panels_are_realtime_only():
    # A batch line's TTFT (hours of queueing, by design) must not drown the realtime TTFT.
    for title in ("TTFT", "TPOT"):
        latency = [s for s in _selectors_of("fleet-overview.json", title)
                   if s.name.startswith("vllm:")]
        assert latency, title
        for sel in latency:
            assert ("class", "=", "realtime") in sel.matchers, (title, sel)


def test_batch_panels_select_batch_lines_by_the_label_workers_write():
    for title in ("Batch lines finished/s", "Batch line E2E p95"):
        for sel in _selectors_of("batch-progress.json", title):
            assert ("tier", "=", "batch") in sel.matchers, (title, sel)


def test_slo_targets_are_drawn_on_latency_and_attainment_panels():
    for board in ("fleet-overview.json", "tenant-slos.json", "batch-progress.json"):
        for panel in _panels(_board(board)["panels"]):
            title, exprs = panel["title"], [t["expr"] for t in panel["targets"]]
            if panel["type"] == "timeseries" and "attainment" in title.lower():
                steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
                assert any(s["value"] for s in steps), f"{title}: no objective line"
                assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] \
                    != "off"
            if panel["type"] == "timeseries" and ("TTFT" in title or "TPOT" in title) \
                    and "attainment" not in title.lower():
                assert any("fairway_slo_target_seconds" in e for e in exprs), title


def test_headline_stats_and_queue_depth_by_tenant_and_tier():
    fleet = _panels(_board("fleet-overview.json")["panels"])
    stats = [p for p in fleet if p["type"] == "stat"]
    assert len(stats) >= 4 and all(p["gridPos"]["y"] == 0 for p in stats)
    tenants = _board("tenant-slos.json")
    queue_exprs = [t["expr"] for b in (tenants, _board("scheduler.json"), {"panels": fleet})
                   for p in _panels(b["panels"]) for t in p["targets"]
                   if "fairway_queued_jobs" in t["expr"]]
    assert any("by (tenant)" in e for e in queue_exprs)
    assert any("by (tier)" in e for e in queue_exprs)
    assert any("by (tenant, tier)" in e for e in queue_exprs)


def test_provisioning_and_scrape_config():
    datasource = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    for path in DASHBOARDS:
        for panel in _panels(json.loads(path.read_text())["panels"]):
            assert panel["datasource"]["uid"] == uid
    scrape = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in scrape["scrape_configs"]}
    assert jobs == {"fairway-api", "fairway-scheduler", "fairway-worker"}
    assert scrape["rule_files"] == ["alerts.yml"]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./dashboards/grafana/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
