"""`fairway up`'s demo tenant and key, and tenants made directly in the database (tests).
Every key issued here is audited, as the admin API audits its own."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

import service.store.models  # noqa: F401  # all tables, so foreign keys resolve
from service.admin import audit
from service.cli.state import read_text, write_private
from service.store.db import sync_session
from service.store.models.plans import Plan
from service.store.models.tenants import ApiKey, Tenant
from service.store.settings import Settings
from service.tenants.accounts import create_tenant, get_tenant_by_name, issue_key
from service.tenants.keys import hash_key

DEMO_TENANT = "demo"
UP_ACTOR = "fairway-up"


def create_tenant_with_key(settings: Settings, name: str, *, plan: str = "standard",
                           weight: float | None = None, actor: str = "cli"
                           ) -> tuple[uuid.UUID, str]:
    """A tenant and its key. Its fair-share weight is its plan's (as the admin API gives it)
    unless ``weight`` says otherwise; 1.0 for a plan not in the table."""
    with sync_session(settings.database_url) as session:
        if weight is None:
            weight = session.scalar(select(Plan.weight).where(Plan.name == plan)) or 1.0
        tenant = _new_tenant(session, name=name, plan=plan, weight=weight, actor=actor)
        key = _issue_audited(session, tenant, settings.secret_key, name="default", actor=actor)
        session.commit()
        return tenant.id, key


def demo_key(settings: Settings, key_file: Path) -> str:
    """The demo tenant's key: the one kept in ``key_file`` while it still works (same server
    secret, not revoked or expired, tenant not suspended), else a new one, stored there."""
    with sync_session(settings.database_url) as session:
        kept = read_text(key_file)
        if kept is not None and _works(session, kept, settings.secret_key):
            return kept
        tenant = get_tenant_by_name(session, name=DEMO_TENANT) or _new_tenant(
            session, name=DEMO_TENANT, plan="standard", weight=1.0, actor=UP_ACTOR)
        key = _issue_audited(session, tenant, settings.secret_key, name=UP_ACTOR,
                             actor=UP_ACTOR)
        session.commit()
    write_private(key_file, key + "\n")
    return key


def _works(session: Session, clear: str, secret: str) -> bool:
    row = session.execute(
        select(ApiKey, Tenant).join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(ApiKey.key_hash == hash_key(clear, secret))).first()
    if row is None:
        return False
    key, tenant = row
    expired = key.expires_at is not None and key.expires_at <= dt.datetime.now(dt.UTC)
    return key.revoked_at is None and tenant.suspended_at is None and not expired


def _new_tenant(session: Session, *, name: str, plan: str, weight: float, actor: str) -> Tenant:
    tenant = create_tenant(session, name=name, plan=plan, weight=weight)
    # Audited as the admin API audits it (the plan under its API name, tier).
    audit.record(session, actor=actor, action="tenant.create", target_type="tenant",
                 target_id=str(tenant.id), details={"name": name, "tier": plan})
    return tenant


def _issue_audited(session: Session, tenant: Tenant, secret: str, *, name: str,
                   actor: str) -> str:
    row, clear = issue_key(session, tenant_id=tenant.id, secret=secret, name=name)
    audit.record(session, actor=actor, action="key.issue", target_type="tenant",
                 target_id=str(tenant.id),
                 details={"key_id": str(row.id), "prefix": row.prefix, "name": name,
                          "expires_at": None})
    return clear
