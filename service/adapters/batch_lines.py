"""Batch files whose lines name one of the tenant's adapters (``ft:`` names).

A batch file holds one model. When it is an adapter, the batch's jobs run on the adapter's
base model (their ``model`` column, which places them on that model's workers; the ``ft:``
name goes to ``adapter_model``, which usage groups by), while each line's request keeps the
``ft:`` name the worker reads the adapter from (worker.adapters), as for realtime requests.
Runs inside the ingest's transaction, so a batch that fails validation afterwards leaves
nothing changed.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.store.adapter_names import is_ft_name, parse_ft_name, tenant_slug
from service.store.models.adapters import LoraAdapter
from service.store.models.jobs import Job
from service.store.models.tenants import Tenant


def known_with_adapter(session: Session, *, batch_id: uuid.UUID, tenant_id: uuid.UUID,
                       model: str | None, known_models: set[str] | None) -> set[str] | None:
    """The models the batch may name: ``known_models`` plus ``model`` when it is the
    tenant's live adapter on a known base model (its jobs then moved to that base). An
    ``ft:`` name that is not one leaves the known set without it (even when the caller knows
    no set): the batch fails with model_not_found rather than wait for a worker forever."""
    if model is None or not is_ft_name(model):
        return known_models
    base = _adapter_base(session, tenant_id, model)
    if base is None or (known_models is not None and base not in known_models):
        return set(known_models or ())
    session.execute(update(Job).where(Job.batch_id == batch_id).values(model=base,
                                                                       adapter_model=model))
    return (known_models or set()) | {model}


def _adapter_base(session: Session, tenant_id: uuid.UUID, model: str) -> str | None:
    parsed = parse_ft_name(model)
    tenant = session.scalar(select(Tenant.name).where(Tenant.id == tenant_id))
    if parsed is None or tenant is None or tenant_slug(tenant) != parsed.tenant_slug:
        return None
    return session.scalar(select(LoraAdapter.base_model).where(
        LoraAdapter.tenant_id == tenant_id, LoraAdapter.deleted_at.is_(None),
        LoraAdapter.base_model == parsed.base_model, LoraAdapter.name == parsed.adapter))
