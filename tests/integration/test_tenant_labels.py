"""Tenant labels get their names from Postgres, and the busiest tenants keep the places."""

from __future__ import annotations

import datetime as dt
import uuid

from service.store.db import sync_session
from service.store.models.tenants import Tenant
from service.store.models.usage import UsageDaily
from service.store.telemetry.labels import OTHER, TenantLabels
from service.store.telemetry.tenant_directory import lookup_name, ranked_tenants


def _name(database_url: str, tenant_id: uuid.UUID) -> str:
    with sync_session(database_url) as session:
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        return tenant.name


def test_names_come_from_the_tenants_table(database_url, make_tenant):
    tid, _ = make_tenant("label")
    name = _name(database_url, tid)
    assert lookup_name(database_url, str(tid)) == name
    assert lookup_name(database_url, str(uuid.uuid4())) is None
    assert lookup_name(database_url, "not-a-uuid") is None
    labels = TenantLabels(max_tenants=10, lookup=lambda t: lookup_name(database_url, t))
    assert labels(tid) == name


def test_rank_puts_the_busiest_tenants_first(database_url, make_tenant):
    busy, _ = make_tenant("busy")
    quiet, _ = make_tenant("quiet")
    today = dt.datetime.now(dt.UTC).date()
    with sync_session(database_url) as session:
        session.add(UsageDaily(tenant_id=busy, day=today, model="m", job_class="realtime",
                               requests=10**9))
        session.add(UsageDaily(tenant_id=quiet, day=today - dt.timedelta(days=30), model="m",
                               job_class="realtime", requests=10**12))  # too long ago
        session.commit()
    ranked = ranked_tenants(database_url, 1000, today=today)
    assert ranked[0] == (str(busy), _name(database_url, busy))
    assert (str(quiet), _name(database_url, quiet)) in ranked  # no recent use: still ranked
    labels = TenantLabels(max_tenants=1)
    labels.rank(ranked_tenants(database_url, 1, today=today))
    assert labels(busy) == _name(database_url, busy) and labels(quiet) == OTHER
