"""The Helm chart's workloads, checked offline on what Helm would render: the API and the
dispatchers, pods and migrations, one worker Deployment per model with its GPU and model
source, and monitoring and autoscaling taken from their one sources (dashboards/grafana/,
the metrics Fairway exports)."""

from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.store.settings import Settings
from service.store.settings_groups import ApiSettings, WorkerSettings
from tests.unit.deploy.chart_support import (
    CHART,
    FULL,
    GRAFANA,
    PRODUCTION,
    ROOT,
    VARIANTS,
    by_kind,
    env_of,
    named,
    pod_spec,
    with_values,
)
from worker.drain import PARK_PATIENCE_S


def test_api_and_dispatchers(render: Any) -> None:
    docs = render(PRODUCTION)
    api = named(docs, "Deployment", "fw-fairway-api")
    spec = pod_spec(api)
    c = spec["containers"][0]
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    # The pod outlives the pause, readiness going false and the streams' grace (the drain).
    api_drain = ApiSettings.model_fields
    assert spec["terminationGracePeriodSeconds"] >= (
        int(c["lifecycle"]["preStop"]["exec"]["command"][1])
        + api_drain["drain_delay_seconds"].default + api_drain["drain_grace_seconds"].default)
    assert env_of(c)["FAIRWAY_API_HOST"]["value"] == "0.0.0.0"
    assert env_of(c)["FAIRWAY_SERVED_MODEL_NAME"]["value"] == "llama-3.1-8b-instruct"
    assert api["spec"]["replicas"] == 2

    dispatcher = named(docs, "Deployment", "fw-fairway-dispatcher")
    assert dispatcher["spec"]["replicas"] == 2  # one leads, one stands by
    d = pod_spec(dispatcher)["containers"][0]
    port = int(env_of(d)["FAIRWAY_SCHEDULER_METRICS_PORT"]["value"])
    assert d["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert d[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    # The probes come from the kubelet, not from inside the pod: not on 127.0.0.1.
    assert env_of(d)["FAIRWAY_METRICS_HOST"]["value"] == "0.0.0.0"
    # The API and the dispatchers share the files volume (batches).
    for doc in (api, dispatcher):
        mounts = {m["name"]: m["mountPath"] for m in pod_spec(doc)["containers"][0]
                  ["volumeMounts"]}
        assert mounts["files"] == "/var/lib/fairway/files"

    pdbs = {p["metadata"]["name"]: p for p in by_kind(docs, "PodDisruptionBudget")}
    assert set(pdbs) == {"fw-fairway-api", "fw-fairway-dispatcher", "fw-fairway-worker-llama-8b"}


def test_the_api_autoscales_when_asked(render: Any) -> None:
    docs = render(with_values(api={"autoscaling": {"enabled": True, "maxReplicas": 6}}))
    hpa = named(docs, "HorizontalPodAutoscaler", "fw-fairway-api")
    assert hpa["spec"]["maxReplicas"] == 6
    assert "replicas" not in named(docs, "Deployment", "fw-fairway-api")["spec"]
    assert not by_kind(render(PRODUCTION), "HorizontalPodAutoscaler")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pods_run_as_non_root_with_requests(render: Any, variant: str) -> None:
    for doc in render(VARIANTS[variant]):
        if doc["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        spec = pod_spec(doc)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"], f"{doc['metadata']['name']}/{c['name']}"


# -- migrations -------------------------------------------------------------------------------

def test_migrations_run_as_a_hook_before_install_and_upgrade(render: Any) -> None:
    job = named(render(PRODUCTION), "Job", "fw-fairway-migrate")
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in hooks["helm.sh/hook-delete-policy"]
    spec = pod_spec(job)
    assert spec["containers"][0]["command"] == ["fairway", "migrate"]
    assert spec["restartPolicy"] == "Never"
    # Before install nothing of the release exists yet: not its ServiceAccount, not its Secret.
    assert "serviceAccountName" not in spec
    assert set(env_of(spec["containers"][0])) & {"FAIRWAY_SECRET_KEY", "FAIRWAY_ADMIN_TOKEN"} \
        == set()
    # Same on upgrade.
    upgrade = named(render(PRODUCTION, upgrade=True), "Job", "fw-fairway-migrate")
    assert upgrade["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_with_trial_databases_migrations_wait_for_the_in_chart_postgres(render: Any) -> None:
    job = named(render(FULL), "Job", "fw-fairway-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_migrate_needs_only_what_the_hook_gives_it(monkeypatch: pytest.MonkeyPatch,
                                                   render: Any) -> None:
    """`fairway migrate`'s settings load from the hook's environment alone (no app Secret)."""
    job = named(render(PRODUCTION), "Job", "fw-fairway-migrate")
    env = env_of(pod_spec(job)["containers"][0])
    for name in [n for n in list(os.environ) if n.startswith("FAIRWAY_")]:
        monkeypatch.delenv(name)
    for name, entry in env.items():
        monkeypatch.setenv(name, entry.get("value", "postgresql://u@db/fairway"))
    assert Settings().database_url == "postgresql://u@db/fairway"


# -- workers ----------------------------------------------------------------------------------

def test_one_worker_deployment_per_model_with_its_gpu(render: Any) -> None:
    docs = render(FULL)
    workers = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")
               if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"}
    assert set(workers) == {"fw-fairway-worker-llama-8b", "fw-fairway-worker-qwen-small",
                            "fw-fairway-worker-smol"}
    for model in FULL["models"]:
        doc = workers[f"fw-fairway-worker-{model['name']}"]
        spec = pod_spec(doc)
        c = spec["containers"][0]
        gpu = model["gpu"]["resourceName"]
        assert c["resources"]["limits"][gpu] == 1
        assert c["resources"]["requests"][gpu] == 1
        others = {k for k in c["resources"]["limits"] if "/" in k} - {gpu}
        assert not others, f"{model['name']}: also asks for {others}"
        env = env_of(c)
        assert env["FAIRWAY_SERVED_MODEL_NAME"]["value"] == model["servedName"]
        assert env["FAIRWAY_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert c["command"] == ["fairway", "worker", "--engine", "vllm"]
        # The drain: the realtime grace, then the parks (worker.drain) and the engine's stop.
        assert spec["terminationGracePeriodSeconds"] >= (
            WorkerSettings.model_fields["drain_grace_seconds"].default + PARK_PATIENCE_S + 30)
        assert c["startupProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
        port = int(env["FAIRWAY_WORKER_METRICS_PORT"]["value"])
        assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        assert env["FAIRWAY_METRICS_HOST"]["value"] == "0.0.0.0"
        budget = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
        assert budget >= 1800  # model load
        assert "lifecycle" not in c
        assert "replicas" not in doc["spec"]  # KEDA owns it here
    llama = pod_spec(workers["fw-fairway-worker-llama-8b"])
    env = env_of(llama["containers"][0])
    assert (env["FAIRWAY_MAX_NUM_SEQS"]["value"], env["FAIRWAY_MAX_MODEL_LEN"]["value"],
            env["FAIRWAY_KV_CACHE_GIB"]["value"]) == ("128", "8192", "40")
    assert llama["runtimeClassName"] == "nvidia"
    assert llama["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert llama["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_each_model_source_becomes_the_model_folder(render: Any) -> None:
    docs = render(FULL)

    def worker(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = pod_spec(named(docs, "Deployment", f"fw-fairway-worker-{name}"))
        volumes = {v["name"]: v for v in spec["volumes"]}
        return spec, volumes

    spec, volumes = worker("llama-8b")
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert env_of(spec["containers"][0])["FAIRWAY_MODEL_PATH"]["value"] == "/models/llama-3.1-8b"
    spec, volumes = worker("qwen-small")
    assert volumes["model"]["hostPath"]["path"] == "/data/models/qwen2.5-1.5b"
    assert env_of(spec["containers"][0])["FAIRWAY_MODEL_PATH"]["value"] == "/models"
    spec, volumes = worker("smol")
    assert "emptyDir" in volumes["model"]
    (download,) = spec["initContainers"]
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in download["command"]
    assert download["command"][-1] == "/models/model"
    assert env_of(download)["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hub-token"
    assert env_of(spec["containers"][0])["FAIRWAY_MODEL_PATH"]["value"] == "/models/model"
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"


def test_without_keda_the_chart_sets_each_models_replicas(render: Any) -> None:
    values = copy.deepcopy(FULL)
    values["autoscaling"] = {"keda": {"enabled": False}}
    docs = render(values)
    assert named(docs, "Deployment", "fw-fairway-worker-llama-8b")["spec"]["replicas"] == 2
    assert named(docs, "Deployment", "fw-fairway-worker-smol")["spec"]["replicas"] == 1
    assert not by_kind(docs, "ScaledObject")


# -- monitoring and autoscaling ---------------------------------------------------------------

def test_chart_copies_equal_their_one_source() -> None:
    sys.path.insert(0, str(ROOT / "deploy" / "helm"))
    try:
        import sync_files
    finally:
        sys.path.pop(0)
    assert sync_files.stale() == [], "run: python deploy/helm/sync_files.py"
    assert (CHART / "files" / "alerts.yml").read_bytes() == (GRAFANA / "alerts.yml").read_bytes()
    sources = sorted(p.name for p in (GRAFANA / "dashboards").glob("*.json"))
    assert sorted(p.name for p in (CHART / "files" / "dashboards").glob("*.json")) == sources


def test_the_prometheus_rule_is_alerts_yml(render: Any) -> None:
    rule = named(render(FULL), "PrometheusRule", "fw-fairway")
    assert rule["spec"] == yaml.safe_load((GRAFANA / "alerts.yml").read_text())
    assert not by_kind(render(), "PrometheusRule")  # off by default


def test_the_dashboards_are_configmaps_for_the_grafana_sidecar(render: Any) -> None:
    maps = [m for m in by_kind(render(FULL), "ConfigMap")
            if m["metadata"]["labels"].get("grafana_dashboard") == "1"]
    sources = {p.name: p.read_text() for p in (GRAFANA / "dashboards").glob("*.json")}
    assert len(maps) == len(sources) == 4
    for cm in maps:
        ((name, text),) = cm["data"].items()
        assert text == sources[name]  # byte for byte, not only the same JSON
        assert cm["metadata"]["annotations"]["grafana_folder"] == "Fairway"
    assert not by_kind(render(), "ConfigMap")  # off by default


def test_monitors_scrape_every_process(render: Any) -> None:
    docs = render(FULL)
    sm = named(docs, "ServiceMonitor", "fw-fairway-api")
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    pm = named(docs, "PodMonitor", "fw-fairway")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pm["spec"]["selector"]["matchExpressions"][0]["values"] == ["dispatcher", "worker"]
    for kind in ("ServiceMonitor", "PodMonitor", "ScaledObject"):
        assert not by_kind(render(), kind)  # off by default


def _metric_names() -> set[str]:
    from service.store.telemetry.metrics import REGISTRY

    return {metric.name for metric in REGISTRY.collect()}


def test_a_scaled_object_per_model_on_a_metric_fairway_exports(render: Any) -> None:
    docs = render(FULL)
    scaled = {s["metadata"]["name"]: s for s in by_kind(docs, "ScaledObject")}
    assert set(scaled) == {f"fw-fairway-worker-{m['name']}" for m in FULL["models"]}
    exported = _metric_names()
    for model in FULL["models"]:
        name = f"fw-fairway-worker-{model['name']}"
        so = scaled[name]
        assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": name}
        named(docs, "Deployment", name)
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        assert f'model_name="{model["servedName"]}"' in query
        used = set(re.findall(r"[a-z_:]+(?=\{)", query))
        assert used and used <= exported, f"{used - exported} not exported by Fairway"
    llama = scaled["fw-fairway-worker-llama-8b"]["spec"]
    (trigger,) = llama["triggers"]
    # One worker per unit of the dispatcher's desired count, the leader's only.
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "1"
    assert trigger["metadata"]["query"].startswith("sum(fairway_desired_workers{")
    assert "fairway_scheduler_leader == 1" in trigger["metadata"]["query"]
    assert (llama["minReplicaCount"], llama["maxReplicaCount"]) == (1, 4)
    assert llama["fallback"] == {"failureThreshold": 3, "replicas": 2}  # its fixed pool
    behavior = llama["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == llama["cooldownPeriod"] == 900
    qwen = scaled["fw-fairway-worker-qwen-small"]["spec"]
    assert (qwen["maxReplicaCount"], qwen["triggers"][0]["metadata"]["threshold"]) == (8, "20")
    assert qwen["fallback"]["replicas"] == 1


def test_the_desired_workers_metric_carries_the_reasons_the_docs_name() -> None:
    from scheduler.autoscale import REASONS

    deploy = (ROOT / "docs" / "deploy.md").read_text()
    observability = (ROOT / "docs" / "observability.md").read_text()
    assert "fairway_desired_workers" in deploy
    for reason in REASONS:
        assert f"`{reason}`" in observability, reason


# -- install ----------------------------------------------------------------------------------

def test_the_install_script_installs_what_these_tests_need() -> None:
    import tomllib

    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    names = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in dev}
    assert {"helm-python-sdk", "kubernetes-validate", "pyyaml"} <= names
    install = (ROOT / ".ci" / "install.sh").read_text()
    assert 'extras="dev"' in install and '".[$extras]"' in install


def test_the_packaged_chart_carries_the_copies(helm: Any, tmp_path: Path) -> None:
    """What `helm package` ships renders the same rules and dashboards (a symlink out of the
    chart would not be in the archive)."""
    archive = Path(helm.package(str(CHART), destination=str(tmp_path)))
    packaged = helm.Chart.load_archive(archive.read_bytes())
    values = {"metrics": {"prometheusRule": {"enabled": True},
                          "grafanaDashboards": {"enabled": True}}}
    out = packaged.render(values, name="fw", namespace="fairway")
    docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    rule = named(docs, "PrometheusRule", "fw-fairway")
    assert rule["spec"] == yaml.safe_load((GRAFANA / "alerts.yml").read_text())
    assert len(by_kind(docs, "ConfigMap")) == len(list((GRAFANA / "dashboards").glob("*.json")))
