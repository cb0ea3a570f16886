"""GET /v1/models/{model} through the official SDK, for model ids with '/' in them (Hugging
Face names), without services: the catalog, tenant and session are stand-ins."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import openai
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.web.deps import current_tenant, get_session

SERVED = {"HuggingFaceTB/SmolLM2-135M-Instruct": 1_700_000_000, "plain": 1_700_000_500}


class Catalog:
    async def models(self) -> list[str]:
        return sorted(SERVED)

    async def has(self, model: str) -> bool:
        return model in SERVED

    async def created(self, _session: object, names: list[str]) -> dict[str, int]:
        return {n: SERVED[n] for n in names}


class NoAdapters:
    """A session in which the tenant has no LoRA adapters (the list's only query)."""

    async def scalars(self, _query: object) -> NoAdapters:
        return self

    def all(self) -> list[object]:
        return []


@pytest.fixture
def api() -> openai.OpenAI:
    app = create_app(Settings(database_url="postgresql://unused", redis_url="redis://unused"))
    app.state.catalog = Catalog()

    async def no_session() -> AsyncIterator[NoAdapters]:
        yield NoAdapters()

    app.dependency_overrides[current_tenant] = lambda: Tenant(id=uuid.uuid4(), name="t")
    app.dependency_overrides[get_session] = no_session
    return openai.OpenAI(base_url="http://testserver/v1", api_key="fw-test", max_retries=0,
                         http_client=TestClient(app))


def test_retrieve_a_model_whose_id_has_a_slash(api: openai.OpenAI) -> None:
    model = api.models.retrieve("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert (model.id, model.created, model.object) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct", 1_700_000_000, "model")
    assert api.models.retrieve("plain").created == 1_700_000_500


def test_list_carries_the_created_times(api: openai.OpenAI) -> None:
    assert {m.id: m.created for m in api.models.list().data} == SERVED


def test_an_unknown_model_is_openais_404(api: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        api.models.retrieve("HuggingFaceTB/nope")
    assert info.value.body == {
        "message": "The model 'HuggingFaceTB/nope' does not exist or you do not have access to "
                   "it.", "type": "not_found_error", "param": "model", "code": "model_not_found"}
