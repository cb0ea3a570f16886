"""Tests whose rows must stay out of the session stack's database (rows left with workers that
do not exist, which its dispatcher would re-queue and run): here ``database_url`` and
``make_tenant`` are a database of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from service.cli.bootstrap import create_tenant_with_key
from service.store.settings import Settings


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of this test's own."""
    return private_database_url


@pytest.fixture
def make_tenant(database_url: str) -> Callable[[], tuple[uuid.UUID, str]]:
    settings = Settings(database_url=database_url)
    return lambda: create_tenant_with_key(settings, f"t-{uuid.uuid4().hex[:8]}")
