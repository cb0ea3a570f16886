"""`fairway tenant ...` and `fairway key ...`: the operator's commands, through the running
stack's admin API, so keys are hashed with the server's own secret and every change is
audited. Tenants: service.cli.tenants; keys and their policy: service.cli.keys."""

from __future__ import annotations

from typing import Any

from service.cli import keys, tenants


def add_parser(sub: Any) -> None:
    tenants.add_parser(sub)
    keys.add_parser(sub)
