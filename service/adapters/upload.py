"""Accepting an adapter upload: the archive is received into a private staging folder,
unpacked and checked there, and only a valid adapter's two files reach file storage.

Why an endpoint of its own rather than the Files API with another purpose: an adapter is two
files that are valid only together, checked as a unit against this deployment's engine
(rank, modules, base model); the Files API stores one file as it comes and counts JSONL
lines. One call either registers a usable adapter or answers why not, and nothing that
failed the checks is ever stored.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from service.adapters.archive import ADAPTER_FILES, CONFIG_FILE, WEIGHTS_FILE, extract_adapter
from service.adapters.fetch_url import FetchRefused, check_url, download
from service.adapters.validation import AdapterInfo, InvalidAdapter, check_config, check_weights
from service.files.storage import FileStorage, LocalStorage
from service.files.upload import UploadLimits, receive_upload
from service.store.adapter_names import ADAPTER_NAME, is_ft_name
from service.store.settings import AdapterSettings
from service.web.errors import APIError

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class AcceptedAdapter:
    name: str
    base_model: str
    info: AdapterInfo
    bytes: int


async def accept_upload(content_type: str, body: AsyncIterator[bytes], *,
                        settings: AdapterSettings, storage: FileStorage, key: str,
                        is_served: Callable[[str], Awaitable[bool]]) -> AcceptedAdapter:
    """Receive, check and store an adapter under ``key``; ``is_served``: whether a base
    model name is served here."""
    with tempfile.TemporaryDirectory(prefix="fairway-adapter-") as tmp:
        staging = Path(tmp)
        # The byte limit is the archive's; lines mean nothing in a binary upload.
        limits = UploadLimits(settings.max_adapter_bytes, settings.max_adapter_bytes + 1)
        upload = await receive_upload(content_type, body, storage=LocalStorage(staging),
                                      key="upload", limits=limits)
        name, base = upload.fields.get("name", ""), upload.fields.get("model", "")
        await check_fields(name, base, is_served)
        info, size = await _unpack_check_store(staging, settings, storage, key, param="file")
    return AcceptedAdapter(name, base, info, size)


async def accept_url(url: str, *, name: str, base: str, settings: AdapterSettings,
                     storage: FileStorage, key: str,
                     is_served: Callable[[str], Awaitable[bool]]) -> AcceptedAdapter:
    """Download an archive from ``url`` (an admin's registration) into the staging an
    upload uses, then check and store it exactly as an upload."""
    try:
        check_url(url)
    except FetchRefused as exc:
        raise APIError(400, str(exc), code="invalid_value", param="url") from exc
    await check_fields(name, base, is_served)
    with tempfile.TemporaryDirectory(prefix="fairway-adapter-") as tmp:
        staging = Path(tmp)
        try:
            await download(url, staging / "upload", max_bytes=settings.max_adapter_bytes,
                           timeout_s=settings.adapter_url_timeout_s)
        except FetchRefused as exc:
            raise APIError(400, str(exc), code="invalid_adapter", param="url") from exc
        info, size = await _unpack_check_store(staging, settings, storage, key, param="url")
    return AcceptedAdapter(name, base, info, size)


async def _unpack_check_store(staging: Path, settings: AdapterSettings, storage: FileStorage,
                              key: str, *, param: str) -> tuple[AdapterInfo, int]:
    """Unpack the archive received as ``staging/upload``, check it, and store its two files
    under ``key``; a refusal names ``param``, where the archive came from."""
    folder = staging / "adapter"
    folder.mkdir()
    try:
        info, size = await asyncio.to_thread(_unpack_and_check, staging / "upload", folder,
                                             settings)
    except InvalidAdapter as exc:
        raise APIError(400, str(exc), code="invalid_adapter", param=param) from exc
    await asyncio.to_thread(_store, folder, storage, key)
    return info, size


async def accept_folder(folder: Path, *, name: str, base: str, settings: AdapterSettings,
                        storage: FileStorage, key: str,
                        is_served: Callable[[str], Awaitable[bool]]) -> AcceptedAdapter:
    """Check and store the adapter in a folder of the API's host (an admin's registration)."""
    await check_fields(name, base, is_served)
    try:
        info, size = await asyncio.to_thread(_check_folder, folder, settings)
    except InvalidAdapter as exc:
        raise APIError(400, str(exc), code="invalid_adapter", param="path") from exc
    await asyncio.to_thread(_store, folder, storage, key)
    return AcceptedAdapter(name, base, info, size)


async def check_fields(name: str, base: str,
                       is_served: Callable[[str], Awaitable[bool]]) -> None:
    if not ADAPTER_NAME.match(name):
        raise APIError(400, "name must be 1-64 characters of a-z, 0-9, '.', '_' and '-', "
                            "starting with a letter or digit.",
                       code="invalid_value", param="name")
    if not base or is_ft_name(base) or not await is_served(base):
        raise APIError(400, f"model must name a base model served here, got {base!r}.",
                       code="invalid_value", param="model")


def _check_folder(folder: Path, settings: AdapterSettings) -> tuple[AdapterInfo, int]:
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise InvalidAdapter(f"The folder lacks {', '.join(missing)}.")
    size = sum((folder / name).stat().st_size for name in ADAPTER_FILES)
    if size > settings.max_adapter_bytes:
        raise InvalidAdapter("The adapter's files exceed the adapter size limit.")
    info = check_config((folder / CONFIG_FILE).read_bytes(), max_rank=settings.max_lora_rank)
    check_weights(folder / WEIGHTS_FILE, info)
    return info, size


def _unpack_and_check(archive: Path, folder: Path,
                      settings: AdapterSettings) -> tuple[AdapterInfo, int]:
    size = extract_adapter(archive, folder, max_bytes=settings.max_adapter_bytes)
    info = check_config((folder / CONFIG_FILE).read_bytes(), max_rank=settings.max_lora_rank)
    check_weights(folder / WEIGHTS_FILE, info)
    return info, size


def _store(folder: Path, storage: FileStorage, key: str) -> None:
    for name in ADAPTER_FILES:
        writer = storage.open_writer(f"{key}/{name}")
        try:
            with open(folder / name, "rb") as src:
                while chunk := src.read(_CHUNK):
                    writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        writer.commit()


def delete_stored(storage: FileStorage, key: str) -> None:
    for name in ADAPTER_FILES:
        storage.delete(f"{key}/{name}")

