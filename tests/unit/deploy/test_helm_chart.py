"""The Helm chart (deploy/helm/fairway), checked offline: helm lint, every rendered manifest
against the Kubernetes schemas (kubernetes-validate) and the CRDs' (crd_schemas/), the values
schema refusing bad values with a message that names the key, no secret in values and
secrets only from Secrets, and every setting and command the chart gives a real one. The
workloads themselves: test_helm_workloads.py. No cluster: what is checked is what Helm
would send."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from service.store.settings import Settings, env_var, groups
from tests.unit.deploy.chart_support import (
    CHART,
    CRD_SCHEMAS,
    FAIRWAY_CONTAINERS,
    FULL,
    KUBE_VERSION,
    PRODUCTION,
    VARIANTS,
    by_kind,
    containers,
    env_of,
    named,
    pod_spec,
    with_values,
)

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
                     "ScaledObject", "NetworkPolicy"}


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
    ({"workerDefaults": {"engine": {"device": "tpu"}}}, "/workerDefaults/engine/device"),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}},
                  "autoscaling": {"scaleToZero": "yes"}}]},
     "/models/0/autoscaling/scaleToZero"),
    ({"waitingRoom": {"seconds": -1}}, "/waitingRoom/seconds"),
    ({"image": {"repository": "r", "digest": "0.1.0"}}, "/image/digest"),
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


def _model(**keys: Any) -> dict[str, Any]:
    return {"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}}, **keys}


_TO_ZERO = {"scaleToZero": True}
_KEDA = {"keda": {"enabled": True}}

TEMPLATE_CHECKS = [
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}}},
                 {"name": "a", "servedName": "y", "source": {"hostPath": {"path": "/m"}}}]},
     'models[1].name "a" is used twice'),
    ({"models": [{"name": "a", "servedName": "x", "source": {"hostPath": {"path": "/m"}}},
                 {"name": "b", "servedName": "x", "source": {"hostPath": {"path": "/m"}}}]},
     'models[1].servedName "x" is served by another entry'),
    # The engine against its GPUs.
    ({"models": [_model(gpu={"count": 0})]},
     "models[0] (a): engine.device is gpu but gpu.count is 0: a GPU engine needs at least "
     "one GPU"),
    ({"workerDefaults": {"gpu": {"count": 0}}, "models": [_model()]},
     "engine.device is gpu but gpu.count is 0"),
    ({"models": [_model(engine={"device": "cpu"})]},
     "engine.device is cpu but gpu.count is 1: a CPU engine uses no GPU"),
    ({"models": [_model(engine={"tensorParallelSize": 4}, gpu={"count": 2})]},
     "engine.tensorParallelSize 4 but gpu.count 2: one engine spans exactly "
     "tensorParallelSize GPUs"),
    ({"models": [_model(gpu={"count": 2})]},
     "engine.tensorParallelSize 1 but gpu.count 2"),
    ({"models": [_model(engine={"tensorParallelSize": 2},
                        gpu={"count": 2, "resourceName": "nvidia.com/mig-3g.40gb"})]},
     "gpu.count 2 of nvidia.com/mig-3g.40gb: a process sees one MIG slice only"),
    # Scale to zero's preconditions, and KEDA's bounds.
    ({"models": [_model(autoscaling=_TO_ZERO)]},
     "models[0] (a): autoscaling.scaleToZero needs KEDA"),
    ({"autoscaling": _KEDA, "models": [_model(autoscaling={**_TO_ZERO, "minReplicas": 1})]},
     "scaleToZero and autoscaling.minReplicas are both set"),
    ({"autoscaling": _KEDA, "waitingRoom": {"seconds": 0},
      "models": [_model(autoscaling=_TO_ZERO)]},
     "autoscaling.scaleToZero needs the waiting room, but waitingRoom.seconds is 0"),
    ({"autoscaling": _KEDA, "models": [_model(replicas=6)]},
     "models[0] (a): autoscaling fallback of 6 workers is above maxReplicas 4"),
    ({"autoscaling": _KEDA, "models": [_model(autoscaling={"minReplicas": 3,
                                                           "maxReplicas": 2})]},
     "models[0] (a): autoscaling maxReplicas 2 is below minReplicas 3"),
    ({"env": {"FAIRWAY_WAITING_ROOM_SECONDS": "60"}},
     "env.FAIRWAY_WAITING_ROOM_SECONDS: the chart sets it from waitingRoom.seconds"),
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


