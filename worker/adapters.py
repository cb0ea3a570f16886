"""A worker's side of tenants' LoRA adapters: which adapter a job names, and its files here.

The API placed the job on its base model's workers and kept the client's ``model`` (the
adapter's ``ft:`` name) in the request. The worker looks the adapter up among the job's
tenant's own live adapters (briefly cached), copies its two files from file storage to a
local folder once (concurrent jobs for the same adapter share that one copy), and hands the
engine a `LoraSpec`; the engine loads it (worker.engine.lora). The fetched folders are
bounded on disk (worker.adapter_disk_cache): past ``FAIRWAY_ADAPTER_DISK_CACHE_BYTES`` the
least recently used go, never one the engine holds loaded or a fetch in flight; a deleted
adapter's folder goes when a lookup finds it gone. The adapter's id joins the
tenant's cache salt, so no prefix-cache block is shared across adapters, nor with the base
model.

File storage is read as the local backend lays it out (``<files root>/<key>``): workers must
see the files directory the API writes, as the dispatcher does for batch files.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Histogram
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store.adapter_names import parse_ft_name, tenant_slug
from service.store.models.adapters import LoraAdapter
from service.store.models.tenants import Tenant
from service.store.settings import AdapterSettings, Settings
from service.store.telemetry import metrics as m
from worker.adapter_disk_cache import AdapterDiskCache
from worker.engine.base import EngineError, EngineRequest
from worker.engine.lora import AdapterLoads, LoraConfig, LoraSpec

log = logging.getLogger("fairway.worker")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
LOOKUP_TTL_S = 5.0  # a deleted adapter may still run this long after its deletion

LORA_LOAD_SECONDS = Histogram(
    "fairway_lora_load_seconds", "Time to load a LoRA adapter into a worker's engine (first "
    "use, or again after it was evicted)", (), buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                                                        5.0, 10.0, 30.0, 60.0, 120.0),
    registry=m.REGISTRY)


class AdapterNotFound(EngineError):
    code = "model_not_found"
    param = "model"


@dataclass(frozen=True, slots=True)
class _Found:
    adapter_id: uuid.UUID
    rank: int
    storage_key: str
    bytes: int


class WorkerAdapters:
    def __init__(self, settings: Settings, sessionmaker: async_sessionmaker[AsyncSession],
                 engine: object = None) -> None:
        loads = getattr(engine, "adapter_loads", None)
        if isinstance(loads, AdapterLoads):
            loads.observe = LORA_LOAD_SECONDS.observe
        self._loads = loads if isinstance(loads, AdapterLoads) else None
        # The ft: name each loaded adapter was asked by: the name the dispatcher places by
        # (a job row keeps its base model; its request, the adapter's name).
        self._names: dict[str, str] = {}
        self._sessionmaker = sessionmaker
        self._files_root = settings.files_root
        self._local_root = settings.cache_dir / "lora-adapters" / "fetched"
        # A folder handed to a request is read when its load runs: kept at least that long.
        self.disk = AdapterDiskCache(self._local_root,
                                     settings.adapters.adapter_disk_cache_bytes,
                                     grace_s=settings.adapters.adapter_load_timeout_s)
        self._max_bytes = settings.adapters.max_adapter_bytes
        self._timeout_s = settings.adapters.adapter_load_timeout_s
        self._salted = settings.engine.tenant_cache_isolation
        self._lookups: dict[tuple[uuid.UUID, str], tuple[float, _Found | None]] = {}
        self._fetching: dict[uuid.UUID, asyncio.Future[Path]] = {}
        self.fetches = 0  # copies made from file storage

    async def attach(self, request: EngineRequest, tenant_id: uuid.UUID | None,
                     model: str) -> EngineRequest:
        """``request`` with the adapter ``model`` names (if it names one) and its cache salt."""
        if parse_ft_name(model) is None or tenant_id is None:
            return request
        found = await self._lookup(tenant_id, model)
        if found is None:
            raise AdapterNotFound(f"The model '{model}' does not exist (the adapter was "
                                  f"deleted?).")
        path = await self._fetch(found)
        public_id = "lora-" + found.adapter_id.hex
        self._names[public_id] = model
        request.lora = LoraSpec(public_id, str(path), found.rank)
        request.cache_salt = adapter_cache_salt(request.cache_salt, public_id)
        return request

    def warm(self) -> list[str]:
        """The ft: names of the adapters the engine holds loaded, least recently used first,
        for the heartbeat (scheduler.dispatcher.views.worker_view)."""
        if self._loads is None:
            return []
        return [self._names[i] for i in self._loads.resident() if i in self._names]

    async def _lookup(self, tenant_id: uuid.UUID, model: str) -> _Found | None:
        key = (tenant_id, model)
        cached = self._lookups.get(key)
        if cached is not None and time.monotonic() < cached[0]:
            return cached[1]
        parsed = parse_ft_name(model)
        assert parsed is not None
        async with self._sessionmaker() as session:
            row = (await session.execute(
                select(LoraAdapter.id, LoraAdapter.rank, LoraAdapter.storage_key,
                       LoraAdapter.bytes, Tenant.name)
                .join(Tenant, Tenant.id == LoraAdapter.tenant_id)
                .where(LoraAdapter.tenant_id == tenant_id, LoraAdapter.deleted_at.is_(None),
                       LoraAdapter.base_model == parsed.base_model,
                       LoraAdapter.name == parsed.adapter))).first()
        found = None
        if row is not None and tenant_slug(row.name) == parsed.tenant_slug:
            found = _Found(row.id, row.rank, row.storage_key, row.bytes)
        self._lookups[key] = (time.monotonic() + LOOKUP_TTL_S, found)
        before = cached[1] if cached is not None else None
        if before is not None and (found is None or found.adapter_id != before.adapter_id):
            await self._forget(before.adapter_id)
        return found

    async def _forget(self, adapter_id: uuid.UUID) -> None:
        """The adapter was deleted (or its name now means another): its files go from this
        disk, unless a fetch of it is still in flight (that fetch's requests fail alone)."""
        if adapter_id in self._fetching:
            return
        if await asyncio.to_thread(self.disk.remove, adapter_id.hex):
            log.info("removed the files of deleted adapter %s", adapter_id.hex)

    async def _fetch(self, found: _Found) -> Path:
        """The adapter's local folder, copied once (concurrent callers share the copy)."""
        name = found.adapter_id.hex
        folder = self.disk.folder(name)
        if self.disk.has(name):
            self.disk.touch(name)
            return folder
        pending = self._fetching.get(found.adapter_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch_once(found, folder))
            self._fetching[found.adapter_id] = pending
            pending.add_done_callback(lambda _: self._fetching.pop(found.adapter_id, None))
        try:
            return await asyncio.shield(pending)
        except TimeoutError as exc:
            raise EngineError(f"Fetching the adapter took longer than {self._timeout_s:g} s."
                              ) from exc

    async def _fetch_once(self, found: _Found, folder: Path) -> Path:
        path = await asyncio.wait_for(asyncio.to_thread(self._copy, found, folder),
                                      self._timeout_s)
        # Still in flight here (kept by _needed): the others past the bound go.
        await asyncio.to_thread(self.disk.trim, self._needed())
        return path

    def _needed(self) -> set[str]:
        """Folders that may not go: adapters the engine holds loaded, fetches in flight."""
        loaded = self._loads.resident() if self._loads is not None else []
        return ({i.removeprefix("lora-") for i in loaded}
                | {adapter_id.hex for adapter_id in self._fetching})

    def _copy(self, found: _Found, folder: Path) -> Path:
        if found.bytes > self._max_bytes:
            raise EngineError(f"The adapter is larger than this worker's limit of "
                              f"{self._max_bytes} bytes.")
        parts = found.storage_key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise EngineError("The adapter's storage key is unsafe.")
        source = self._files_root.joinpath(*parts)
        staging = folder.with_name(f".{folder.name}.{uuid.uuid4().hex}")
        staging.mkdir(parents=True)
        try:
            for name in ADAPTER_FILES:
                shutil.copyfile(source / name, staging / name)
            staging.rename(folder)
        except FileNotFoundError as exc:
            raise EngineError("The adapter's files are gone from storage.") from exc
        except OSError:
            # Another process of this host renamed its copy into place first (a rename onto
            # a folder with files fails): that copy serves.
            if not all((folder / name).is_file() for name in ADAPTER_FILES):
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.fetches += 1
        log.info("fetched adapter %s", found.adapter_id.hex)
        return folder


def adapter_cache_salt(tenant_salt: str | None, adapter_id: str) -> str:
    """The prefix-cache namespace of an adapter's requests: the tenant's, narrowed to the
    adapter (a base-model block must never serve an adapter's request, nor the reverse)."""
    return hashlib.sha256(f"{tenant_salt or ''}\x00{adapter_id}".encode()).hexdigest()[:32]


def lora_config(settings: AdapterSettings) -> LoraConfig:
    """The engine's LoRA config from the adapter settings."""
    return LoraConfig(max_loras=settings.max_loras, max_cpu_loras=settings.max_cpu_loras,
                      max_lora_rank=settings.max_lora_rank,
                      load_timeout_s=settings.adapter_load_timeout_s,
                      concurrent_loads=settings.adapter_concurrent_loads,
                      sim_load_s=settings.sim_adapter_load_s)
