"""The admin adapter view's load fields from workers' beats (service.admin.adapter_loads): the
last load is the one that ended latest on any worker, the median is over every live worker's
recent loads, warm workers are those whose beat lists the ft: name, and a malformed beat part
is skipped."""

from __future__ import annotations

from typing import Any

from service.admin.adapter_loads import AdapterLoads

A, B = "lora-" + "a" * 32, "lora-" + "b" * 32
FT_A, FT_B = "ft:m:acme:a", "ft:m:acme:b"


def beat(worker: str, adapters: Any, times: Any) -> dict[str, Any]:
    return {"worker_id": worker, "adapters": adapters, "adapter_load_times": times}


def test_two_workers_loads_and_warm_holders() -> None:
    loads = AdapterLoads.of([
        beat("w2", [FT_A], {A: {"seconds": [0.5, 0.1], "at": 200.0}}),
        beat("w1", [FT_B, FT_A], {A: {"seconds": [0.3], "at": 100.0},
                                  B: {"seconds": [1.2], "at": 50}}),
        {"worker_id": "w3", "models": ["m"]},  # LoRA off: no adapter fields
    ])
    assert loads.view(A, FT_A) == {"last_load_s": 0.1, "median_load_s": 0.3,
                                   "load_samples": 3, "warm_on": ["w1", "w2"]}
    assert loads.view(B, FT_B) == {"last_load_s": 1.2, "median_load_s": 1.2,
                                   "load_samples": 1, "warm_on": ["w1"]}


def test_an_adapter_no_worker_loaded_has_no_times() -> None:
    assert AdapterLoads.of([beat("w1", [], {})]).view(A, FT_A) == {
        "last_load_s": None, "median_load_s": None, "load_samples": 0, "warm_on": []}


def test_malformed_parts_are_skipped() -> None:
    loads = AdapterLoads.of([
        {"adapters": [FT_A], "adapter_load_times": {A: {"seconds": [9.0], "at": 1.0}}},  # no id
        beat("w1", "not-a-list", {A: "nope", B: {"seconds": ["x", -1, True], "at": 1.0}}),
        beat("w2", [FT_A, 7], {A: {"seconds": [0.2], "at": "late"}}),
        beat("w3", [FT_A], {A: {"seconds": [0.4, "x"], "at": 5}}),
        beat("w4", None, []),
    ])
    assert loads.view(A, FT_A) == {"last_load_s": 0.4, "median_load_s": 0.4,
                                   "load_samples": 1, "warm_on": ["w2", "w3"]}
    assert loads.view(B, FT_B)["load_samples"] == 0
