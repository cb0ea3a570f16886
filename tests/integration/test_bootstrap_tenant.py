"""A tenant made by ``create_tenant_with_key`` (benches, the chaos harness, tests) gets its
plan's fair-share weight, as one made through the admin API does: it used to get 1.0 whatever
the plan, so a bench's premium tenant shared the pool equally with a standard one."""

from __future__ import annotations

import uuid

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.models.tenants import Tenant
from service.store.settings import Settings


def test_the_tenant_gets_its_plans_weight_unless_told(settings: Settings) -> None:
    premium, _ = create_tenant_with_key(settings, f"bt-{uuid.uuid4().hex[:8]}", plan="premium")
    told, _ = create_tenant_with_key(settings, f"bt-{uuid.uuid4().hex[:8]}", plan="premium",
                                     weight=3.0)
    with sync_session(settings.database_url) as session:
        assert session.get(Tenant, premium).weight == 2.0  # type: ignore[union-attr]
        assert session.get(Tenant, told).weight == 3.0  # type: ignore[union-attr]
