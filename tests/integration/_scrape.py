"""Find and scrape the /metrics endpoints of a test stack's processes."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from service.store.telemetry.endpoint import KEY_PREFIX
from tests.support.stack import Stack

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def scrape(url: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(fetch(url)):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= lbl)


def has(samples: Samples, name: str, **labels: str) -> bool:
    want = set(labels.items())
    return any(n == name and want <= lbl for (n, lbl) in samples)


def api_url(stack: Stack) -> str:
    return stack.base_url + "/metrics"


def worker_url(stack: Stack, worker_id: str) -> str:
    beat = stack.heartbeat(worker_id)
    assert beat and beat.get("metrics_port"), f"worker {worker_id} publishes no metrics port"
    return f"http://127.0.0.1:{beat['metrics_port']}/metrics"


def scheduler_url(stack: Stack, name: str = "scheduler") -> str:
    """The endpoint the stack's dispatcher process published in Redis (matched by pid)."""
    pid = stack.procs[name].popen.pid
    redis = Redis.from_url(stack.redis_url)
    for key in redis.scan_iter(match=KEY_PREFIX + "scheduler:*"):
        raw = redis.get(key)
        value: Mapping[str, object] = json.loads(raw) if raw else {}
        if value.get("pid") == pid:
            return f"http://127.0.0.1:{value['port']}/metrics"
    raise AssertionError(f"dispatcher pid {pid} published no metrics endpoint")
