"""The Prometheus alert rules (dashboards/grafana/alerts.yml): promtool accepts them and the
config that loads them, and promtool's rule unit tests show each alert firing when it
should and staying quiet on a healthy fleet."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

GRAFANA = Path(__file__).resolve().parents[3] / "dashboards" / "grafana"
ALERTS = GRAFANA / "alerts.yml"


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("promtool is missing in CI: .ci/run installs the Debian package "
                        "'prometheus', which provides it")
        pytest.skip("promtool not installed (Debian package prometheus)")
    return binary


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120)


def test_the_alerts_the_issue_asks_for():
    names = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
             for r in g["rules"]}
    assert {"FairwaySloFastBurn", "FairwaySloSlowBurn", "FairwayRealtimeQueueGrowing",
            "FairwayNoLiveWorker", "FairwayNoDispatcherLeader"} <= names


def test_promtool_checks_the_rules_and_the_config_that_loads_them():
    rules = _run("check", "rules", str(ALERTS))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = _run("check", "config", str(GRAFANA / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout + config.stderr


def _leader(value: str) -> dict:
    return {"series": 'fairway_scheduler_leader{job="fairway-scheduler",instance="d1"}',
            "values": value}


def _slo(kind: str, outcome: str, values: str) -> dict:
    return {"series": f'fairway_slo_requests_total{{job="fairway-api",instance="a1",'
                      f'tenant="acme",class="realtime",tier="default",kind="{kind}",'
                      f'outcome="{outcome}"}}', "values": values}


def _fired(name: str, at: str, **labels: str) -> dict:
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": labels}] if labels else []}


RULE_TESTS = [
    {   # A leader, two live workers, TTFT met by all, TPOT missed by half: only TPOT burns.
        "interval": "1m",
        "input_series": [
            _leader("1x90"),
            {"series": 'fairway_scheduler_workers{job="fairway-scheduler",instance="d1"}',
             "values": "2x90"},
            _slo("ttft", "met", "0+10x90"), _slo("ttft", "missed", "0x90"),
            _slo("tpot", "met", "0+5x90"), _slo("tpot", "missed", "0+5x90"),
            {"series": 'fairway_queued_jobs{job="fairway-scheduler",instance="d1",'
                       'tenant="acme",class="realtime",tier="default"}', "values": "3x90"},
        ],
        "alert_rule_test": [
            _fired("FairwaySloFastBurn", "80m", severity="page", **{"class": "realtime"},
                   kind="tpot"),
            _fired("FairwayNoLiveWorker", "80m"),
            _fired("FairwayNoDispatcherLeader", "80m"),
            _fired("FairwayRealtimeQueueGrowing", "80m"),  # queued, but not growing
        ],
    },
    {   # The realtime queue grows by 2 a minute; the only worker is gone; no leader after 30m.
        "interval": "1m",
        "input_series": [
            _leader("1x30 0x30"),
            {"series": 'fairway_scheduler_workers{job="fairway-scheduler",instance="d1"}',
             "values": "0x60"},
            {"series": 'fairway_queued_jobs{job="fairway-scheduler",instance="d1",'
                       'tenant="acme",class="realtime",tier="priority"}',
             "values": "0+2x60"},
        ],
        "alert_rule_test": [
            _fired("FairwayNoLiveWorker", "10m", severity="page"),
            _fired("FairwayRealtimeQueueGrowing", "25m", severity="page",
                   **{"class": "realtime"}),
            _fired("FairwayNoDispatcherLeader", "25m"),
            _fired("FairwayNoDispatcherLeader", "45m", severity="page"),
        ],
    },
    {   # No dispatcher reports at all: absent() still pages.
        "interval": "1m",
        "input_series": [{"series": 'fairway_http_requests_total{job="fairway-api"}',
                          "values": "0+1x10"}],
        "alert_rule_test": [_fired("FairwayNoDispatcherLeader", "5m", severity="page")],
    },
]


def test_alerts_fire_when_they_should_and_only_then(tmp_path: Path):
    # promtool compares annotations too; theirs (templated texts) are checked by
    # `check rules` above, so these tests run on a copy without them.
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    spec = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": RULE_TESTS}
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _run("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
