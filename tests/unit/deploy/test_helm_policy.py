"""A policy scan of what the chart renders: checkov over the manifests of each example value set
finds nothing beyond the checks deploy/helm/.checkov.yaml skips, each for the reason written
there; and what those skips would otherwise hide is checked here instead (read-only roots and
a high UID for Fairway's own containers, digests in the GPU sets).

checkov pins versions the project's own dependencies cannot share (packaging<24,
networkx<2.7, cachetools<6), so it lives in a virtual environment of its own
(deploy/helm/checkov-requirements.txt): the test runs `$FAIRWAY_CHECKOV`, else `checkov` on
PATH, and is skipped without either. Offline, checkov reports no severities (they come from
its vendor's platform), so the bar here is no failed check at all rather than "no HIGH"."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_support import (
    EXAMPLE_NAMES,
    ROOT,
    example,
    named,
    pod_spec,
)

CONFIG = ROOT / "deploy" / "helm" / ".checkov.yaml"
REQUIREMENTS = ROOT / "deploy" / "helm" / "checkov-requirements.txt"
# The chart's defaults name a tag pulled IfNotPresent and leave NetworkPolicies off: findings
# the scan must see (the proof that a failed check fails the test).
SCANNED = {**{name: example(name) for name in EXAMPLE_NAMES}, "defaults": {}}


def _checkov() -> str:
    found = os.environ.get("FAIRWAY_CHECKOV") or shutil.which("checkov")
    if not found:
        pytest.skip("checkov not found: install deploy/helm/checkov-requirements.txt in a venv "
                    "of its own and set FAIRWAY_CHECKOV to its bin/checkov")
    return found


def _write(render: Any, values: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True)
    for i, doc in enumerate(render(values)):
        (folder / f"{i:02d}-{doc['kind'].lower()}.yaml").write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def scans(render: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov's report for each value set, the runs side by side (each is ~10 s of start-up)."""
    checkov = _checkov()
    root = tmp_path_factory.mktemp("rendered")
    runs = {}
    for name, values in SCANNED.items():
        _write(render, values, root / name)
        runs[name] = subprocess.Popen(
            [checkov, "-d", str(root / name), "--config-file", str(CONFIG), "--skip-download",
             "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
    reports = {}
    for name, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert out.strip(), f"{name}: checkov printed nothing (rc {run.returncode}): {err[-2000:]}"
        reports[name] = json.loads(out)
    return reports


def _failed(report: dict[str, Any]) -> list[str]:
    return [f"{f['check_id']} {f['check_name']}: {f['resource']}"
            for f in report["results"]["failed_checks"]]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_checkov_finds_nothing_in_the_example_value_sets(scans: dict[str, Any],
                                                         name: str) -> None:
    report = scans[name]
    assert report["check_type"] == "kubernetes"
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= 15 and summary["passed"] >= 300  # it did look
    assert _failed(report) == []


def test_the_scan_fails_on_a_finding(scans: dict[str, Any]) -> None:
    failed = _failed(scans["defaults"])
    # A tag pulled IfNotPresent; pods no NetworkPolicy selects.
    assert {f.split()[0] for f in failed} == {"CKV_K8S_15", "CKV2_K8S_6"}


def test_every_skipped_check_says_why() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    skipped = config["skip-check"]
    assert skipped and all(re.fullmatch(r"CKV2?_K8S_\d+", c) for c in skipped)
    lines = CONFIG.read_text().splitlines()
    for check in skipped:
        at = lines.index(f"  - {check}")
        reason: list[str] = []
        while lines[at - 1].lstrip().startswith("#"):
            at -= 1
            reason.insert(0, lines[at].strip("# "))
        assert len(" ".join(reason)) > 60, f"{check}: no reason written above it"
    pins = [ln for ln in REQUIREMENTS.read_text().splitlines() if ln and ln[0] != "#"]
    assert len(pins) == 1 and pins[0].startswith("checkov==")  # one tool, one version


FAIRWAY_PODS = [("Deployment", "fw-fairway-api"), ("Deployment", "fw-fairway-dispatcher"),
                ("Job", "fw-fairway-migrate")]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_what_the_skips_would_hide_holds_for_fairways_own_pods(render: Any,
                                                               name: str) -> None:
    docs = render(example(name))
    for kind, pod in FAIRWAY_PODS:
        spec = pod_spec(named(docs, kind, pod))
        assert spec["securityContext"]["runAsUser"] >= 10000
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, f"{pod}/{c['name']}"
    workers = [d for d in docs if d["metadata"]["labels"].get(
        "app.kubernetes.io/component") == "worker" and d["kind"] == "Deployment"]
    for worker in workers:
        spec = pod_spec(worker)
        assert spec["securityContext"]["runAsUser"] >= 10000
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec.get("initContainers", []):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["resources"]["limits"]["memory"], f"{c['name']}: no memory limit"
    if name != "cpu-trial":
        for doc in [d for d in docs if d["kind"] in ("Deployment", "Job")]:
            for c in pod_spec(doc)["containers"]:
                assert re.search(r"@sha256:[0-9a-f]{64}$", c["image"]), c["image"]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _admits(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The ingress rules of every policy that selects a pod with these labels."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"
                and _selects(d["spec"]["podSelector"], labels)]
    assert policies and all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)
    return [rule for p in policies for rule in p["spec"].get("ingress", [])]


def test_network_policies_admit_only_what_each_pod_serves(render: Any) -> None:
    values = example("cpu-trial")
    values["networkPolicy"] = {"enabled": True,
                               "apiFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    docs = render(values)
    monitoring = {"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    pods = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]:
            d["spec"]["template"]["metadata"]["labels"]
            for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")}
    assert set(pods) == {"api", "dispatcher", "worker", "migrate", "postgres", "redis"}
    assert _admits(docs, pods["migrate"]) == []  # selected by the default deny alone
    (api,) = _admits(docs, pods["api"])
    assert api["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert api["from"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}, monitoring]  # and /metrics
    for component in ("dispatcher", "worker"):
        (rule,) = _admits(docs, pods[component])
        assert rule == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [monitoring]}
        port = pod_spec(named(docs, "Deployment", f"fw-fairway-{component}"
                              if component == "dispatcher"
                              else "fw-fairway-worker-smollm2-135m"))["containers"][0]["ports"]
        assert [p["name"] for p in port] == ["metrics"]  # the named port the rule opens
    for component, number in (("postgres", 5432), ("redis", 6379)):
        (rule,) = _admits(docs, pods[component])
        assert rule["ports"] == [{"port": number, "protocol": "TCP"}]
        (peer,) = rule["from"]
        assert _selects(peer["podSelector"], pods["api"])
        assert not _selects(peer["podSelector"], {"app.kubernetes.io/name": "other"})
    assert not [d for d in render(example("cpu-trial") | {"networkPolicy": {"enabled": False}})
                if d["kind"] == "NetworkPolicy"]
