"""Reads the two files of a PEFT adapter out of an uploaded archive (zip or tar, maybe
gzipped), as ``save_pretrained`` writes them: ``adapter_config.json`` and
``adapter_model.safetensors``, at the top or in one folder. Other members (a README) are
ignored. Each member is copied with its size checked as it is read, so an archive that
claims small members and inflates (a zip bomb) stops at the limit.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from service.adapters.validation import InvalidAdapter

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE)
_CHUNK = 1 << 20

Members = Iterator[tuple[str, Callable[[], IO[bytes]]]]


def extract_adapter(archive: Path, into: Path, *, max_bytes: int) -> int:
    """Write the adapter's two files into ``into``; returns their total size in bytes."""
    found: dict[str, int] = {}
    with _members(archive) as members:
        for name, open_member in members:
            base = name.rstrip("/").rsplit("/", 1)[-1]
            if base not in ADAPTER_FILES or name.count("/") > 1:
                continue
            if base in found:
                raise InvalidAdapter(f"The archive holds more than one {base}.")
            with open_member() as src:
                found[base] = _copy_capped(src, into / base, max_bytes - sum(found.values()))
    missing = [f for f in ADAPTER_FILES if f not in found]
    if missing:
        raise InvalidAdapter(f"The archive lacks {', '.join(missing)} (upload the folder "
                             f"PEFT's save_pretrained writes, as a zip or tar).")
    return sum(found.values())


def _copy_capped(src: IO[bytes], dest: Path, budget: int) -> int:
    written = 0
    with open(dest, "wb") as out:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            if written > budget:
                raise InvalidAdapter("The adapter's files exceed the adapter size limit.")
            out.write(chunk)
    return written


@contextmanager
def _members(archive: Path) -> Iterator[Members]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            yield ((info.filename, _zip_member(zf, info))
                   for info in zf.infolist() if not info.is_dir())
        return
    try:
        tf = tarfile.open(archive)  # noqa: SIM115 - closed below
    except tarfile.TarError as exc:
        raise InvalidAdapter("Upload the adapter as a zip or tar archive.") from exc
    with tf:
        yield ((m.name.removeprefix("./"), _tar_member(tf, m)) for m in tf if m.isfile())


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: zf.open(info)


def _tar_member(tf: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        fh = tf.extractfile(member)
        if fh is None:
            raise InvalidAdapter(f"Cannot read {member.name} from the archive.")
        return fh
    return open_member
