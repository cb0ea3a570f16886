"""Time to recovery: from the moment a fault is over (the dependency is back, the process
killed or thawed) to the first new request that succeeds, after /readyz says 200."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import httpx

from service.cli.chaos.cluster import MODEL
from service.cli.chaos.load import Tenant


def time_to_recovery(base_url: str, tenant: Tenant, since: float,
                     timeout_s: float) -> float | None:
    """Seconds from ``since`` (time.monotonic()) until readiness and then a fresh small
    request both succeed; None if that does not happen within ``timeout_s``."""
    deadline = since + timeout_s
    n = 0
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(5.0, read=10.0)) as http:
        while time.monotonic() < deadline:
            if _ok(functools.partial(http.get, "/readyz")):
                n += 1
                body = {"model": MODEL, "max_tokens": 4, "service_tier": "priority",
                        "messages": [{"role": "user", "content": f"probe {n}"}]}
                if _ok(functools.partial(http.post, "/v1/chat/completions", json=body,
                                         headers={"Authorization": f"Bearer {tenant.key}"})):
                    return time.monotonic() - since
            time.sleep(0.1)
    return None


def _ok(send: Callable[[], httpx.Response]) -> bool:
    try:
        return send().status_code == 200
    except httpx.HTTPError:
        return False
