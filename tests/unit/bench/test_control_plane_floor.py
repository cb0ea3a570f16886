"""bench/control_plane_floor.py: the per-request CPU arithmetic, the floor, and the rung-1
server (in process, no servers)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from bench import control_plane_floor as floor

BODY = {"model": "m", "stream": True, "max_tokens": 4,
        "messages": [{"role": "user", "content": "ping"}]}


def test_ms_per_request_subtracts_idle_and_divides_by_requests() -> None:
    # 4 s window, 1000 requests: server used 3.0 s, of which 0.05 cores x 4 s = 0.2 s idle.
    ms = floor.ms_per_request({"server": 3.0, "postgres": 1.0, "redis": 0.1},
                              {"server": 0.05, "postgres": 0.0}, wall_s=4.0, requests=1000)
    assert ms == pytest.approx({"server": 2.8, "postgres": 1.0, "redis": 0.1})


def test_ms_per_request_never_negative_nor_divides_by_zero() -> None:
    assert floor.ms_per_request({"redis": 0.01}, {"redis": 0.5}, 1.0, 10) == {"redis": 0.0}
    assert floor.ms_per_request({"server": 1.0}, {}, 1.0, 0) == {"server": 1000.0}


def test_server_side_leaves_the_load_generator_out() -> None:
    ms = {"server": 0.9, "postgres": 0.4, "redis": 0.2, "load generator": 0.7}
    assert floor.server_side_ms(ms) == pytest.approx(1.5)


def test_floor_is_cores_times_a_thousand_over_ms() -> None:
    assert floor.floor_rps(0.5, 2) == pytest.approx(4000.0)
    assert floor.floor_rps(2.5, 8) == pytest.approx(3200.0)
    line = floor.floor_line("asgi+pg", 1.25, 2)
    assert line.startswith("floor: at most 1600 requests/s on this box if nothing but asgi+pg "
                           "ran per job")


def test_unknown_rung_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown rung"):
        floor.build_app("asgi+kafka")


def test_asgi_rung_streams_three_chunks_and_done() -> None:
    with TestClient(floor.build_app("asgi")) as client:
        assert client.get("/healthz").json() == {"ok": True}
        resp = client.post("/v1/chat/completions", json=BODY)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [e for e in resp.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert len(chunks) == 3
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {"m"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_asgi_rung_rejects_a_malformed_body() -> None:
    with TestClient(floor.build_app("asgi")) as client:
        resp = client.post("/v1/chat/completions", json={"model": "m"})
    assert resp.status_code == 422
