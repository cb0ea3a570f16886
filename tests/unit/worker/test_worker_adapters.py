"""A worker's copies of adapter files, without services: one copy per adapter however many
jobs ask at once, another process's finished copy is used as it is, a missing or oversized
adapter fails its request, and the adapter narrows the tenant's cache salt."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from service.store.settings import Settings
from worker.adapters import ADAPTER_FILES, WorkerAdapters, _Found, adapter_cache_salt
from worker.engine.base import EngineError


def _adapters(tmp_path: Path, **adapters: object) -> WorkerAdapters:
    settings = Settings(database_url="postgresql://unused", redis_url="redis://unused",
                        data_dir=tmp_path / "data", batches={"files_dir": tmp_path / "files"},
                        adapters=adapters)
    return WorkerAdapters(settings, sessionmaker=None)  # type: ignore[arg-type]


def _stored(tmp_path: Path, size: int = 10) -> _Found:
    adapter_id = uuid.uuid4()
    key = f"adapters/{uuid.uuid4().hex}/{adapter_id.hex}"
    folder = tmp_path / "files" / key
    folder.mkdir(parents=True)
    for name in ADAPTER_FILES:
        (folder / name).write_bytes(b"x" * size)
    return _Found(adapter_id, 8, key, size * 2)


def test_one_copy_however_many_ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRWAY_CACHE_DIR", str(tmp_path / "cache"))
    adapters, found = _adapters(tmp_path), _stored(tmp_path)

    async def burst() -> list[Path]:
        return await asyncio.gather(*(adapters._fetch(found) for _ in range(20)))

    folders = asyncio.run(burst())
    assert len(set(folders)) == 1 and adapters.fetches == 1
    assert sorted(p.name for p in folders[0].iterdir()) == sorted(ADAPTER_FILES)
    asyncio.run(adapters._fetch(found))  # already here: no copy
    assert adapters.fetches == 1


def test_another_processs_copy_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRWAY_CACHE_DIR", str(tmp_path / "cache"))
    adapters, found = _adapters(tmp_path), _stored(tmp_path)
    folder = tmp_path / "cache" / "lora-adapters" / "fetched" / found.adapter_id.hex
    folder.mkdir(parents=True)
    for name in ADAPTER_FILES:
        (folder / name).write_bytes(b"theirs")
    assert adapters._copy(found, folder) == folder  # the rename onto it fails; theirs serves
    assert (folder / ADAPTER_FILES[0]).read_bytes() == b"theirs"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging left


def test_missing_or_too_large_adapters_fail(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRWAY_CACHE_DIR", str(tmp_path / "cache"))
    adapters = _adapters(tmp_path, max_adapter_bytes=100)
    gone = _Found(uuid.uuid4(), 8, "adapters/nobody/nothing", 10)
    with pytest.raises(EngineError, match="gone from storage"):
        asyncio.run(adapters._fetch(gone))
    with pytest.raises(EngineError, match="larger than"):
        asyncio.run(adapters._fetch(_stored(tmp_path, size=60)))


def test_the_adapter_narrows_the_cache_salt() -> None:
    salts = {adapter_cache_salt(t, a) for t in ("tenant-a", "tenant-b", None)
             for a in ("lora-1", "lora-2")}
    assert len(salts) == 6 and "tenant-a" not in salts
