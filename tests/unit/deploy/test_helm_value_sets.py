"""The chart's example value sets (deploy/helm/fairway/examples/), the ones docs/deploy.md
tells users to copy: what each renders, object by object, and what makes each what it says
(no GPU for the CPU trial, a whole GPU for the one-model set, MIG slices and a model that
scales to zero for the last). Lint and schema validation of the same sets run with the other
value sets in test_helm_chart.py; the policy scan in test_helm_policy.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart_support import (
    EXAMPLE_NAMES,
    EXAMPLES_DIR,
    by_kind,
    env_of,
    example,
    named,
    pod_spec,
)

_CORE = {("Deployment", "fw-fairway-api"), ("Service", "fw-fairway-api"),
         ("PodDisruptionBudget", "fw-fairway-api"), ("Deployment", "fw-fairway-dispatcher"),
         ("PodDisruptionBudget", "fw-fairway-dispatcher"), ("Job", "fw-fairway-migrate"),
         ("Secret", "fw-fairway-app"), ("ServiceAccount", "fw-fairway")}
_MONITORING = {("ServiceMonitor", "fw-fairway-api"), ("PodMonitor", "fw-fairway"),
               ("PrometheusRule", "fw-fairway")}
_POLICIES = {("NetworkPolicy", f"fw-fairway-{name}") for name in
             ("default-deny", "api", "metrics")}
_DASHBOARDS = {("ConfigMap", f"fw-fairway-dashboard-{name}") for name in
               ("batch-progress", "fleet-overview", "scheduler", "tenant-slos")}


def _worker(name: str, *, scaled: bool) -> set[tuple[str, str]]:
    objects = {("Deployment", f"fw-fairway-worker-{name}"),
               ("PodDisruptionBudget", f"fw-fairway-worker-{name}")}
    return objects | ({("ScaledObject", f"fw-fairway-worker-{name}")} if scaled else set())


# What each set renders, every object by kind and name (docs/deploy.md lists the same).
EXPECTED = {
    "cpu-trial": _CORE | _POLICIES | _worker("smollm2-135m", scaled=False) | {
        ("Secret", "fw-fairway-trial-databases"), ("Service", "fw-fairway-postgres"),
        ("StatefulSet", "fw-fairway-postgres"), ("Service", "fw-fairway-redis"),
        ("Deployment", "fw-fairway-redis"), ("NetworkPolicy", "fw-fairway-postgres"),
        ("NetworkPolicy", "fw-fairway-redis")},
    "one-gpu-model": _CORE | _POLICIES | _MONITORING | _DASHBOARDS
    | _worker("llama-8b", scaled=True),
    "two-models-mig-scale-to-zero": _CORE | _POLICIES | _MONITORING
    | _worker("qwen-7b", scaled=True) | _worker("smollm2-1-7b", scaled=True),
}


def test_every_example_file_is_in_the_matrix() -> None:
    assert sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml")) == sorted(EXAMPLE_NAMES)
    assert set(EXPECTED) == set(EXAMPLE_NAMES)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_value_set_renders_exactly_its_objects(render: Any, name: str) -> None:
    docs = render(example(name))
    rendered = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(rendered) == len(set(rendered)), f"{name}: an object rendered twice"
    assert set(rendered) == EXPECTED[name]
    # Every object lands in the release's namespace, none in whatever kubectl's context says.
    assert {d["metadata"]["namespace"] for d in docs} == {"fairway"}


def _workers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["labels"]["fairway-model"]: d for d in by_kind(docs, "Deployment")
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"}


def _limits(doc: dict[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = pod_spec(doc)["containers"][0]["resources"]["limits"]
    return limits


def test_the_cpu_trial_asks_for_no_gpu(render: Any) -> None:
    docs = render(example("cpu-trial"))
    (worker,) = _workers(docs).values()
    assert not [k for k in _limits(worker) if "/" in k]
    assert worker["spec"]["replicas"] == 1  # no KEDA in a trial
    ref = env_of(pod_spec(worker)["containers"][0])["FAIRWAY_DATABASE_URL"]["valueFrom"]
    assert ref["secretKeyRef"]["name"] == "fw-fairway-trial-databases"
    # A tag, pulled on every start (the GPU sets pin digests instead).
    for container in [c for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")
                      for c in pod_spec(d).get("initContainers", []) + pod_spec(d)["containers"]]:
        assert "@" not in container["image"]
        assert container["imagePullPolicy"] == "Always", container["name"]


def test_one_gpu_model_runs_on_a_whole_gpu_pinned_by_digest(render: Any) -> None:
    docs = render(example("one-gpu-model"))
    (worker,) = _workers(docs).values()
    assert {k: v for k, v in _limits(worker).items() if "/" in k} == {"nvidia.com/gpu": 1}
    assert pod_spec(worker)["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    scaled = named(docs, "ScaledObject", "fw-fairway-worker-llama-8b")["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (1, 3)
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "Job")
              for c in pod_spec(d)["containers"]}
    (image,) = images
    assert image.startswith("registry.example.com/fairway@sha256:")
    # One model and no waitingRoom value: the API's own defaults, nothing set for them.
    api = env_of(pod_spec(named(docs, "Deployment", "fw-fairway-api"))["containers"][0])
    assert not {"FAIRWAY_CATALOG_MODELS", "FAIRWAY_WAITING_ROOM_SECONDS"} & set(api)


def test_two_models_share_mig_slices_and_one_scales_to_zero(render: Any) -> None:
    values = example("two-models-mig-scale-to-zero")
    docs = render(values)
    workers = _workers(docs)
    assert set(workers) == {m["name"] for m in values["models"]}  # one Deployment per model
    slices = {name: {k: v for k, v in _limits(doc).items() if "/" in k}
              for name, doc in workers.items()}
    assert slices == {"qwen-7b": {"nvidia.com/mig-3g.40gb": 1},
                      "smollm2-1-7b": {"nvidia.com/mig-1g.10gb": 1}}
    for doc in workers.values():
        requests = pod_spec(doc)["containers"][0]["resources"]["requests"]
        assert [k for k in requests if k.startswith("nvidia.com/mig-")]
        assert "replicas" not in doc["spec"]  # KEDA's

    always_on = named(docs, "ScaledObject", "fw-fairway-worker-qwen-7b")["spec"]
    to_zero = named(docs, "ScaledObject", "fw-fairway-worker-smollm2-1-7b")["spec"]
    assert always_on["minReplicaCount"] == 1
    assert to_zero["minReplicaCount"] == 0
    assert "idleReplicaCount" not in to_zero  # only for a floor above zero
    assert to_zero["maxReplicaCount"] == 2
    # Its own cooldown (asleep sooner); the other model keeps the chart's.
    assert (to_zero["cooldownPeriod"], always_on["cooldownPeriod"]) == (300, 900)
    window = to_zero["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert window["stabilizationWindowSeconds"] == 300
    # With Prometheus unreachable the model holds a worker rather than staying asleep.
    assert to_zero["fallback"]["replicas"] == 1
    # It wakes on the same count: the dispatcher's desired workers, above 0 once asked.
    assert to_zero["triggers"] == [
        {**always_on["triggers"][0], "metadata": {
            **always_on["triggers"][0]["metadata"],
            "query": always_on["triggers"][0]["metadata"]["query"].replace(
                "Qwen/Qwen2.5-7B-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct")}}]

    api = env_of(pod_spec(named(docs, "Deployment", "fw-fairway-api"))["containers"][0])
    assert api["FAIRWAY_SERVED_MODEL_NAME"]["value"] == "Qwen/Qwen2.5-7B-Instruct"
    # The second model is in the API's catalog with no worker alive, so its requests wait.
    assert api["FAIRWAY_CATALOG_MODELS"]["value"] == "HuggingFaceTB/SmolLM2-1.7B-Instruct"
    assert api["FAIRWAY_WAITING_ROOM_SECONDS"]["value"] == "300"


@pytest.mark.parametrize(("seconds", "env"), [(None, None), (0, "0"), (45.5, "45.5")])
def test_the_waiting_room_bound_reaches_every_process_when_set(render: Any, seconds: Any,
                                                               env: str | None) -> None:
    """Unset leaves the API's default; 0 (no waiting room) is a value, not an absence."""
    values = example("one-gpu-model") | {"waitingRoom": {"seconds": seconds}}
    docs = render(values)
    for name in ("fw-fairway-api", "fw-fairway-dispatcher", "fw-fairway-worker-llama-8b"):
        found = env_of(pod_spec(named(docs, "Deployment", name))["containers"][0]).get(
            "FAIRWAY_WAITING_ROOM_SECONDS")
        assert (found and found["value"]) == env, name
