"""Where file bytes live, behind a small interface, so a deployment can swap the backend.

The default is a local directory (`Settings.files_root`). An S3-compatible store fits the same
interface: `open_writer` maps to a multipart upload (parts of >= 5 MiB, completed on `commit`,
aborted on `abort`), `open_reader` to a streaming GetObject body and `delete` to DeleteObject.
docs/batches.md describes how to add it. Every method is synchronous and streams: callers
pass and receive chunks and lines, never a whole file.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import BinaryIO, Protocol


class StorageWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    def commit(self) -> None:
        """Make the object visible under its key (atomically: readers never see half)."""

    def abort(self) -> None: ...


class FileStorage(Protocol):
    def open_writer(self, key: str) -> StorageWriter: ...

    def open_reader(self, key: str) -> BinaryIO: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...


class _LocalWriter:
    def __init__(self, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        self._final = final
        self._tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.part")
        self._fh = open(self._tmp, "wb")  # noqa: SIM115 - closed in commit/abort

    def write(self, data: bytes) -> None:
        self._fh.write(data)

    def commit(self) -> None:
        self._fh.close()
        os.replace(self._tmp, self._final)  # atomic on one filesystem

    def abort(self) -> None:
        self._fh.close()
        self._tmp.unlink(missing_ok=True)


class LocalStorage:
    """Objects as files under one root; keys are relative paths made of safe segments."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe storage key: {key!r}")
        return self.root.joinpath(*parts)

    def open_writer(self, key: str) -> _LocalWriter:
        return _LocalWriter(self._path(key))

    def open_reader(self, key: str) -> BinaryIO:
        return open(self._path(key), "rb")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


def storage_for(files_root: Path) -> FileStorage:
    return LocalStorage(files_root)


def iter_chunks(reader: BinaryIO, size: int = 256 * 1024):  # type: ignore[no-untyped-def]
    """Yield a reader's bytes in chunks and close it (for streamed HTTP responses)."""
    with reader:
        while chunk := reader.read(size):
            yield chunk
