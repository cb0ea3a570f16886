"""What the Helm chart's tests share: where the chart and its one sources are, the value sets
they render (defaults, everything on, the production path, and the chart's examples/ a user
copies) and small readers of rendered manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

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
    "networkPolicy": {"enabled": True, "apiFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
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
# The value sets users read and copy (deploy/helm/fairway/examples/): a CPU trial, one GPU
# model, two models on MIG slices with one scaling to zero.
EXAMPLES_DIR = CHART / "examples"
EXAMPLE_NAMES = ("cpu-trial", "one-gpu-model", "two-models-mig-scale-to-zero")


def example(name: str) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())
    return values


VARIANTS = {"defaults": {}, "full": FULL, "production": PRODUCTION,
            **{name: example(name) for name in EXAMPLE_NAMES}}
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
