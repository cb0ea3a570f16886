"""A worker's fetched adapter files on its disk, bounded by recency.

Each adapter fetched from file storage is a folder ``<root>/<adapter id hex>`` holding its
two files (worker.adapters). Past ``max_bytes`` in all, the least recently used folders are
removed, except those the caller says it needs (adapters the engine holds loaded, fetches in
flight) and those used within ``grace_s``: a folder handed to a request is read by the engine
only when that request's load runs, and several worker processes of one host may share the
folder (each knows only its own loads). Recency is the folder's mtime, touched at every use,
so it survives a restart and is common to the host's processes.

A folder is renamed out of the way before it is deleted, so a reader never finds one half
gone: it is there whole, or not there and fetched again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fairway.worker")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    used_at: float  # the folder's mtime: its last use
    bytes: int


class AdapterDiskCache:
    def __init__(self, root: Path, max_bytes: int, *, grace_s: float) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.grace_s = grace_s
        self.removed = 0  # folders removed (over the bound, or their adapter deleted)

    def folder(self, name: str) -> Path:
        return self.root / name

    def has(self, name: str) -> bool:
        folder = self.folder(name)
        return all((folder / f).is_file() for f in ADAPTER_FILES)

    def touch(self, name: str) -> None:
        """Mark the adapter's folder as just used."""
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile: the next use fetches
            os.utime(self.folder(name))

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self._entries())

    def trim(self, keep: Collection[str] = ()) -> list[str]:
        """Remove least recently used folders until the total is within ``max_bytes``, never
        one named in ``keep`` nor one used within ``grace_s``; returns the names removed."""
        entries = sorted(self._entries(), key=lambda e: e.used_at)
        total = sum(e.bytes for e in entries)
        recent = time.time() - self.grace_s
        removed: list[str] = []
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.name in keep or entry.used_at > recent:
                continue
            if self.remove(entry.name):
                total -= entry.bytes
                removed.append(entry.name)
        if removed:
            log.info("removed %d fetched adapter folder(s) past %d bytes: %s", len(removed),
                     self.max_bytes, ", ".join(removed))
        return removed

    def remove(self, name: str) -> bool:
        """Delete the adapter's folder (if there); returns whether this call removed it."""
        trash = self.root / f".trash-{name}.{uuid.uuid4().hex}"
        try:
            self.folder(name).rename(trash)
        except FileNotFoundError:
            return False
        except OSError as exc:  # a disk problem must not fail the request that tidies up
            log.warning("could not remove fetched adapter folder %s: %s", name, exc)
            return False
        shutil.rmtree(trash, ignore_errors=True)
        self.removed += 1
        return True

    def _entries(self) -> list[_Entry]:
        entries: list[_Entry] = []
        try:
            children = list(os.scandir(self.root))
        except FileNotFoundError:
            return entries
        for child in children:
            # Dot-names are copies still being made (and folders on their way out).
            if child.name.startswith(".") or not child.is_dir(follow_symlinks=False):
                continue
            try:
                used_at = child.stat(follow_symlinks=False).st_mtime
                size = sum(f.stat().st_size for f in os.scandir(child.path) if f.is_file())
            except FileNotFoundError:
                continue  # removed by another process meanwhile
            entries.append(_Entry(child.name, used_at, size))
        return entries
