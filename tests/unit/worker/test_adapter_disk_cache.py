"""A worker's fetched adapter folders stay within their bound: the least recently used go
first, never one the engine holds loaded, a fetch in flight or one used within the grace; a
deleted adapter's folder goes when the worker's lookup finds it gone."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import worker.adapters as worker_adapters
from service.store.settings import AdapterSettings, BatchSettings, Settings
from worker.adapter_disk_cache import ADAPTER_FILES, AdapterDiskCache
from worker.adapters import WorkerAdapters, _Found
from worker.engine.lora import AdapterLoads, LoraConfig, LoraSpec


def _folder(root: Path, name: str, size: int, used_s_ago: float) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for f in ADAPTER_FILES:
        (folder / f).write_bytes(b"x" * (size // 2))
    at = time.time() - used_s_ago
    os.utime(folder, (at, at))


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_least_recently_used_go_first_within_the_bound(tmp_path: Path) -> None:
    cache = AdapterDiskCache(tmp_path, max_bytes=250, grace_s=60)
    for name, ago in (("old", 500), ("older", 900), ("new", 100), ("newest", 70)):
        _folder(tmp_path, name, 100, ago)
    assert cache.total_bytes() == 400
    assert cache.trim() == ["older", "old"]
    assert _names(tmp_path) == ["new", "newest"] and cache.total_bytes() == 200
    assert cache.trim() == [] and cache.removed == 2  # within the bound: nothing more goes


def test_needed_and_recent_folders_stay_past_the_bound(tmp_path: Path) -> None:
    cache = AdapterDiskCache(tmp_path, max_bytes=0, grace_s=60)
    for name, ago in (("loaded", 900), ("idle", 800), ("handed-out", 5)):
        _folder(tmp_path, name, 100, ago)
    (tmp_path / ".copying.123").mkdir()  # a fetch's copy in progress: not counted, not removed
    assert cache.trim(keep={"loaded"}) == ["idle"]
    assert _names(tmp_path) == [".copying.123", "handed-out", "loaded"]
    cache.touch("loaded")  # a use makes it the most recent
    assert (tmp_path / "loaded").stat().st_mtime > time.time() - 5
    cache.touch("never-fetched")  # nothing there: no error
    assert cache.remove("loaded") and not cache.remove("loaded")
    assert not cache.has("loaded")


# -- through the worker's fetches ---------------------------------------------------------


class _FakeDB:
    """Answers the worker's adapter lookup with ``rows[adapter name]`` (None: not live)."""

    def __init__(self) -> None:
        self.rows: dict[str, Any] = {}
        self.name = ""

    def __call__(self) -> _FakeDB:
        return self

    async def __aenter__(self) -> _FakeDB:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, statement: object) -> Any:
        return SimpleNamespace(first=lambda: self.rows.get(self.name))


class _Engine:
    def __init__(self) -> None:
        async def nothing(spec: LoraSpec) -> None:
            return None
        self.adapter_loads = AdapterLoads(LoraConfig(max_loras=1, max_cpu_loras=1),
                                          load=nothing, unload=nothing)


def _worker(tmp_path: Path, db: _FakeDB, engine: _Engine,
            monkeypatch: pytest.MonkeyPatch, cache_bytes: int) -> WorkerAdapters:
    monkeypatch.setenv("FAIRWAY_CACHE_DIR", str(tmp_path / "cache"))
    settings = Settings(database_url="postgresql://unused", redis_url="redis://unused",
                        data_dir=tmp_path / "data",
                        batches=BatchSettings(files_dir=tmp_path / "files"),
                        adapters=AdapterSettings(adapter_disk_cache_bytes=cache_bytes))
    adapters = WorkerAdapters(settings, db, engine)  # type: ignore[arg-type]
    assert adapters.disk.grace_s == settings.adapters.adapter_load_timeout_s
    adapters.disk.grace_s = 0.01  # the bound and the loaded count, not a recent use
    return adapters


def _stored(tmp_path: Path, size: int = 50) -> _Found:
    adapter_id = uuid.uuid4()
    key = f"adapters/t/{adapter_id.hex}"
    folder = tmp_path / "files" / key
    folder.mkdir(parents=True)
    for name in ADAPTER_FILES:
        (folder / name).write_bytes(b"x" * size)
    return _Found(adapter_id, 8, key, size * 2)


def test_fetches_past_the_bound_drop_the_idle_never_the_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _Engine()
    adapters = _worker(tmp_path, _FakeDB(), engine, monkeypatch, cache_bytes=250)
    a, b, c, d = (_stored(tmp_path) for _ in range(4))  # 100 bytes each

    async def run() -> None:
        path_a = await adapters._fetch(a)
        await engine.adapter_loads.ensure(LoraSpec("lora-" + a.adapter_id.hex, str(path_a), 8))
        for found in (b, c, d):
            await asyncio.sleep(0.02)  # past the grace
            await adapters._fetch(found)

    asyncio.run(run())
    # a is loaded in the engine: kept though least recently used; b went, then c.
    assert _names(adapters.disk.root) == sorted([a.adapter_id.hex, d.adapter_id.hex])
    assert adapters.disk.removed == 2
    asyncio.run(adapters._fetch(b))  # needed again: fetched again
    assert adapters.fetches == 5


def test_a_deleted_adapters_folder_goes_when_its_lookup_expires(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _FakeDB()
    adapters = _worker(tmp_path, db, _Engine(), monkeypatch, cache_bytes=10**9)
    found = _stored(tmp_path)
    db.name = "v1"
    db.rows["v1"] = SimpleNamespace(id=found.adapter_id, rank=8, storage_key=found.storage_key,
                                    bytes=found.bytes, name="Acme")
    tenant, model = uuid.uuid4(), "ft:base:acme:v1"
    monkeypatch.setattr(worker_adapters, "LOOKUP_TTL_S", 0.0)

    async def run() -> None:
        seen = await adapters._lookup(tenant, model)
        assert seen is not None
        await adapters._fetch(seen)
        assert adapters.disk.has(found.adapter_id.hex)
        assert await adapters._lookup(tenant, model) == seen  # still live: kept
        assert adapters.disk.has(found.adapter_id.hex)
        db.rows["v1"] = None  # deleted
        assert await adapters._lookup(tenant, model) is None

    asyncio.run(run())
    assert _names(adapters.disk.root) == [] and adapters.disk.removed == 1
