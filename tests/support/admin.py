"""An admin API client for tests (the dev admin token the test stack runs with)."""

from __future__ import annotations

from typing import Any

import httpx

from service.store.settings import DEV_ADMIN_TOKEN

# A plan's quotas name every limit; these lift them all.
NO_LIMITS = {"requests_per_minute": "unlimited", "tokens_per_minute": "unlimited",
             "concurrent_requests": "unlimited", "batch_enqueued_tokens": "unlimited",
             "monthly_tokens": "unlimited"}


class Admin:
    def __init__(self, base_url: str, token: str = DEV_ADMIN_TOKEN) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {token}",
                                          "X-Fairway-Actor": "pytest"})

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.http.request(method, path, **kw)
        assert resp.status_code < 300, (resp.status_code, resp.text)
        return resp.json()

    def create_tenant(self, name: str, plan: str = "standard") -> tuple[str, str]:
        out = self.ok("POST", "/admin/tenants", json={"name": name, "tier": plan})
        return out["id"], out["key"]["key"]

    def set_quotas(self, tenant_id: str, **overrides: Any) -> Any:
        return self.ok("PUT", f"/admin/tenants/{tenant_id}/quotas",
                       json={"overrides": overrides})

    def quotas(self, tenant_id: str) -> Any:
        return self.ok("GET", f"/admin/tenants/{tenant_id}/quotas")
