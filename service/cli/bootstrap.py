"""Admin bootstrap: tenants and keys from the command line (and `fairway up`'s demo tenant)."""

from __future__ import annotations

import uuid

from service.store.db import sync_session
from service.store.settings import Settings
from service.tenants.service import create_tenant, get_tenant_by_name, issue_key


def create_tenant_with_key(settings: Settings, name: str, *, tier: str = "standard",
                           weight: float = 1.0) -> tuple[uuid.UUID, str]:
    with sync_session(settings.database_url) as session:
        tenant = create_tenant(session, name=name, tier=tier, weight=weight)
        _, key = issue_key(session, tenant_id=tenant.id, secret=settings.secret_key)
        session.commit()
        return tenant.id, key


def issue_key_for(settings: Settings, tenant_name: str, *, name: str = "default") -> str:
    with sync_session(settings.database_url) as session:
        tenant = get_tenant_by_name(session, name=tenant_name)
        if tenant is None:
            raise SystemExit(f"no tenant named {tenant_name!r}")
        _, key = issue_key(session, tenant_id=tenant.id, secret=settings.secret_key, name=name)
        session.commit()
        return key


def ensure_demo_key(settings: Settings) -> str:
    """A fresh key for the demo tenant (keys are shown once, so each `up` issues one)."""
    with sync_session(settings.database_url) as session:
        tenant = get_tenant_by_name(session, name="demo") or create_tenant(session, name="demo")
        _, key = issue_key(session, tenant_id=tenant.id, secret=settings.secret_key,
                           name="fairway-up")
        session.commit()
        return key
