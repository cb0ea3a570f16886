"""How a tenant's LoRA adapter is named as a model: OpenAI's fine-tune form
``ft:<base model>:<tenant slug>:<adapter name>``, e.g. ``ft:SmolLM2-135M-Instruct:acme:support-v2``.

The API (service.adapters) and the workers (worker.adapters) both read these names, so they
live on the floor. A name is only ever resolved within the tenant that sends it: the slug is
checked against the sender's own, and the adapter is looked up among its own adapters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FT_PREFIX = "ft:"
# An adapter's own name: short, lower case, URL- and shell-safe, no ':' (the separator).
ADAPTER_NAME = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,63}\Z")  # \Z: no trailing newline


@dataclass(frozen=True, slots=True)
class FtName:
    base_model: str
    tenant_slug: str
    adapter: str


def tenant_slug(tenant_name: str) -> str:
    """The tenant's name as it appears in adapter model names (lower case, [a-z0-9-])."""
    slug = re.sub(r"[^a-z0-9]+", "-", tenant_name.lower()).strip("-")
    return slug or "tenant"


def ft_name(base_model: str, tenant_name: str, adapter: str) -> str:
    return f"{FT_PREFIX}{base_model}:{tenant_slug(tenant_name)}:{adapter}"


def is_ft_name(model: str) -> bool:
    return model.startswith(FT_PREFIX)


def parse_ft_name(model: str) -> FtName | None:
    """The parts of an ``ft:`` name, or None if it is not one. The base model may itself
    contain ':'; the last two fields never do."""
    if not is_ft_name(model):
        return None
    parts = model[len(FT_PREFIX):].rsplit(":", 2)
    if len(parts) != 3 or not all(parts) or not ADAPTER_NAME.match(parts[2]):
        return None
    return FtName(parts[0], parts[1], parts[2])
