"""The Helm chart (deploy/helm/fairway), checked offline: helm lint, every rendered manifest
against the Kubernetes schemas (kubernetes-validate) and the CRDs' (crd_schemas/), the values
schema refusing bad values with a message that names the key, no secret in values, one worker
Deployment per model with its GPU, and the alert rules and dashboards taken from their one
source in dashboards/grafana/. No cluster: what is checked is what Helm would send."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from service.store.settings import Settings, env_var, groups
from service.store.settings_groups import ApiSettings, WorkerSettings
from worker.drain import PARK_PATIENCE_S

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "fairway"
GRAFANA = ROOT / "dashboards" / "grafana"
CRD_SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
KUBE_VERSION = "1.27.0"  # the oldest the chart accepts (Chart.yaml's kubeVersion)

# Everything the chart can render switched on, with three models, one per source kind.
FULL: dict[str, Any] = {
    "trialDatabases": {"enabled": True},
    "files": {"existingClaim": "fairway-files"},
    "api": {"autoscaling": {"enabled": True}},
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboards": {"enabled": True},
    },
    "autoscaling": {"keda": {"enabled": True}},
    "models": [
        {"name": "llama-8b", "servedName": "meta-llama/Llama-3.1-8B-Instruct",
         "source": {"pvc": {"claimName": "models", "path": "llama-3.1-8b"}},
         "engine": {"maxNumSeqs": 128, "maxModelLen": 8192, "kvCacheGiB": 40},
         "gpu": {"count": 1, "resourceName": "nvidia.com/gpu"},
         "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                          "effect": "NoSchedule"}],
         "runtimeClassName": "nvidia", "replicas": 2},
        {"name": "qwen-small", "servedName": "qwen2.5-1.5b",
         "source": {"hostPath": {"path": "/data/models/qwen2.5-1.5b"}},
         "gpu": {"count": 1, "resourceName": "nvidia.com/mig-1g.10gb"},
         "autoscaling": {"maxReplicas": 8, "threshold": 20}},
        {"name": "smol", "servedName": "SmolLM2-135M-Instruct",
         "source": {"download": {"repo": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                 "tokenSecret": {"name": "hub-token"}}},
         "gpu": {"count": 1, "resourceName": "nvidia.com/mig-1g.10gb"}},
    ],
}
# The production path of docs/deploy.md: external Postgres and Redis, one model on a PVC.
PRODUCTION: dict[str, Any] = {
    "image": {"repository": "registry.example.com/fairway", "tag": "0.1.0"},
    "database": {"existingSecret": "fairway-database"},
    "redis": {"existingSecret": "fairway-redis"},
    "files": {"existingClaim": "fairway-files"},
    "models": [{"name": "llama-8b", "servedName": "llama-3.1-8b-instruct",
                "source": {"pvc": {"claimName": "models", "path": "llama-3.1-8b"}},
                "gpu": {"count": 1, "resourceName": "nvidia.com/gpu"}}],
}
VARIANTS = {"defaults": {}, "full": FULL, "production": PRODUCTION}
FAIRWAY_CONTAINERS = {"api", "dispatcher", "worker", "migrate"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            spec = pod_spec(doc)
            found += spec.get("initContainers", []) + spec["containers"]
    return found


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def with_values(**changes: Any) -> dict[str, Any]:
    values = copy.deepcopy(PRODUCTION)
    values.update(changes)
    return values


# -- helm lint and the schemas ----------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_finds_nothing_wrong(helm: Any, variant: str) -> None:
    report = helm.lint(str(CHART), VARIANTS[variant], strict=True,
                       kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    # Severity 1 is helm's "info" (e.g. "icon is recommended"); 2 and up are warnings, errors.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def _crd_schema(doc: dict[str, Any]) -> dict[str, Any] | None:
    group, _, version = doc["apiVersion"].rpartition("/")
    path = CRD_SCHEMAS / f"{doc['kind'].lower()}-{group}-{version}.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_is_valid_kubernetes(render: Any, variant: str) -> None:
    import kubernetes_validate

    docs = render(VARIANTS[variant])
    assert docs
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        schema = _crd_schema(doc)
        if schema is not None:
            jsonschema.validate(doc, schema)
            continue
        # strict: fields the schema does not know are errors too (a misspelt key).
        for version in (KUBE_VERSION, kubernetes_validate.latest_version()):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} on {version}: {exc.caught}")
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"{where}: no {version} schema for {doc['apiVersion']} "
                            f"{doc['kind']} (a CRD without a schema in crd_schemas/?)")


def test_the_full_render_has_every_kind(render: Any) -> None:
    kinds = {d["kind"] for d in render(FULL)}
    assert kinds >= {"Deployment", "StatefulSet", "Service", "Secret", "Job",
                     "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceAccount",
                     "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap",
                     "ScaledObject"}


BAD_VALUES = [
    ({"modles": []}, "additional properties 'modles' not allowed"),
    ({"models": []}, "/models"),
    ({"models": [{"name": "Llama_8B", "servedName": "x",
                  "source": {"hostPath": {"path": "/m"}}}]}, "/models/0/name"),
    ({"models": [{"name": "a", "servedName": "x", "source": {}}]}, "/models/0/source"),
    ({"models": [{"name": "a", "servedName": "x",
                  "source": {"hostPath": {"path": "/m"}, "pvc": {"claimName": "c"}}}]},
     "/models/0/source"),
    ({"models": [{"name": "a", "source": {"hostPath": {"path": "/m"}}}]}, "servedName"),
    ({"workerDefaults": {"gpu": {"resourceName": "gpu"}}}, "/workerDefaults/gpu/resourceName"),
    ({"workerDefaults": {"gpu": {"count": -1}}}, "/workerDefaults/gpu/count"),
    ({"api": {"replicas": "two"}}, "/api/replicas"),
    ({"dispatcher": {"policy": "random"}}, "/dispatcher/policy"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
    ({"api": {"resources": {"requests": {"memory": "lots"}}}}, "/api/resources/requests/memory"),
    ({"autoscaling": {"keda": {"minReplicas": 0}}}, "/autoscaling/keda/minReplicas"),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}},
                  "autoscaling": {"minReplicas": 0}}]}, "/models/0/autoscaling/minReplicas"),
    ({"autoscaling": {"keda": {"fallback": {"failureThreshold": 0}}}},
     "/autoscaling/keda/fallback/failureThreshold"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_VALUES,
                         ids=[m for _, m in BAD_VALUES])
def test_bad_values_fail_the_schema_naming_the_key(helm: Any, chart: Any, bad: dict[str, Any],
                                                   message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.validate_schema(bad)
    # What `helm install` does: the same refusal, before any template runs.
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.render(bad)


TEMPLATE_CHECKS = [
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}}},
                 {"name": "a", "servedName": "y", "source": {"hostPath": {"path": "/m"}}}]},
     'models[1].name "a" is used twice'),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}}},
                 {"name": "b", "servedName": "x", "source": {"hostPath": {"path": "/m"}}}]},
     'models[1].servedName "x" is served by another entry'),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}},
                  "engine": {"tensorParallelSize": 4}, "gpu": {"count": 2}}]},
     "engine.tensorParallelSize 4 needs at least that many GPUs"),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}},
                  "engine": {"tensorParallelSize": 2}, "gpu": {"count": 2}}]},
     "does not pass a tensor parallel size to vLLM yet"),
    ({"env": {"FAIRWAY_SECRET_KEY": "hunter2"}}, "env.FAIRWAY_SECRET_KEY: connection URLs and "
                                                 "secrets never go in values"),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}},
                  "env": {"FAIRWAY_DATABASE_URL": "postgresql://u:p@db/fw"}}]},
     "models[0].env.FAIRWAY_DATABASE_URL"),
    ({"database": {"existingSecret": ""}}, "database.existingSecret: name the Secret"),
]


@pytest.mark.parametrize(("bad", "message"), TEMPLATE_CHECKS,
                         ids=[m[:40] for _, m in TEMPLATE_CHECKS])
def test_values_the_schema_cannot_judge_fail_with_a_message(helm: Any, chart: Any,
                                                            bad: dict[str, Any],
                                                            message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        chart.render(bad)


# -- secrets ----------------------------------------------------------------------------------

SECRET_WORDS = re.compile(r"password|secret|token|key|url", re.IGNORECASE)


def _leaves(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, node)]


def test_default_values_hold_no_secret() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Keys that sound secret hold only names of Secrets and keys in them, never a value.
    allowed = {".database.existingSecret": "fairway-database", ".database.secretKey": "url",
               ".redis.existingSecret": "fairway-redis", ".redis.secretKey": "url",
               ".secrets.existingSecret": ""}
    sounding = {p: v for p, v in _leaves(values) if SECRET_WORDS.search(p.rsplit(".", 1)[-1])}
    assert sounding == allowed
    urls = [v for _, v in _leaves(values) if isinstance(v, str) and "://" in v]
    assert urls == [values["autoscaling"]["keda"]["prometheusAddress"]]  # no credential in it


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_secrets_reach_the_processes_only_from_secrets(render: Any, variant: str) -> None:
    docs = render(VARIANTS[variant])
    fairway = [c for c in containers(docs) if c["name"] in FAIRWAY_CONTAINERS]
    assert {c["name"] for c in fairway} >= {"api", "dispatcher", "worker", "migrate"}
    for container in fairway:
        env = env_of(container)
        names = ["FAIRWAY_DATABASE_URL"]
        if container["name"] != "migrate":
            names += ["FAIRWAY_REDIS_URL", "FAIRWAY_SECRET_KEY", "FAIRWAY_ADMIN_TOKEN"]
            assert env["FAIRWAY_ENVIRONMENT"]["value"] == "production"
        for name in names:
            assert "value" not in env[name], f"{container['name']}: {name} in plain text"
            assert "secretKeyRef" in env[name]["valueFrom"]


def test_the_chart_generates_the_secret_key_and_admin_token(render: Any) -> None:
    import base64

    secret = named(render(), "Secret", "fw-fairway-app")
    # Kept on uninstall: the key hashes every API key.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    key = base64.b64decode(secret["data"]["secret-key"]).decode()
    token = base64.b64decode(secret["data"]["admin-token"]).decode()
    assert len(key) == 64 and token.startswith("fwadm-") and len(token) > 40
    again = named(render(), "Secret", "fw-fairway-app")  # offline: lookup finds nothing
    assert again["data"]["secret-key"] != secret["data"]["secret-key"]
    lookup = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'lookup "v1" "Secret"' in lookup  # on a cluster the current value is kept


def test_a_secret_of_your_own_replaces_the_generated_one(render: Any) -> None:
    docs = render(with_values(secrets={"existingSecret": "my-fairway"}))
    assert not [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "fw-fairway-app"]
    api = pod_spec(named(docs, "Deployment", "fw-fairway-api"))["containers"][0]
    assert env_of(api)["FAIRWAY_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "my-fairway"


def test_trial_databases_use_their_own_generated_secret(render: Any) -> None:
    docs = render(FULL)
    named(docs, "StatefulSet", "fw-fairway-postgres")
    named(docs, "Deployment", "fw-fairway-redis")
    secret = named(docs, "Secret", "fw-fairway-trial-databases")
    assert set(secret["data"]) == {"postgres-password", "database-url", "redis-url"}
    worker = pod_spec(named(docs, "Deployment", "fw-fairway-worker-smol"))["containers"][0]
    ref = env_of(worker)["FAIRWAY_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "fw-fairway-trial-databases", "key": "database-url"}


# -- the processes ----------------------------------------------------------------------------

def _known_env_vars() -> set[str]:
    names = {env_var(Settings, f) for f in Settings.model_fields if f not in groups()}
    for group in groups().values():
        names |= {env_var(group, f) for f in group.model_fields}
    return names


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_fairway_variable_is_a_setting(render: Any, variant: str) -> None:
    known = _known_env_vars()
    for container in containers(render(VARIANTS[variant])):
        unknown = {n for n in env_of(container) if n.startswith("FAIRWAY_")} - known
        assert not unknown, f"{container['name']}: {unknown} are no settings (docs/settings.md)"


def test_no_service_link_variable_reaches_a_setting(render: Any) -> None:
    """Kubernetes gives each pod <SERVICE>_PORT=tcp://... for every Service in its namespace
    unless told not to. For a release named fairway the API's Service is fairway-api, and
    FAIRWAY_API_PORT=tcp://... would stop every process at its settings."""
    docs = render(PRODUCTION, release="fairway")
    links = set()
    for service in by_kind(docs, "Service"):
        prefix = service["metadata"]["name"].upper().replace("-", "_")
        links |= {f"{prefix}_PORT", f"{prefix}_SERVICE_HOST", f"{prefix}_SERVICE_PORT"}
    assert "FAIRWAY_API_PORT" in links & _known_env_vars()  # the clash is real
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            assert pod_spec(doc)["enableServiceLinks"] is False, doc["metadata"]["name"]


def test_the_commands_are_ones_the_cli_takes(render: Any) -> None:
    from service.cli.main import build_parser

    parser = build_parser()
    for container in containers(render(FULL)):
        command = container.get("command", [])
        if command[:1] == ["fairway"]:
            args = parser.parse_args(command[1:])
            assert callable(args.func)


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
