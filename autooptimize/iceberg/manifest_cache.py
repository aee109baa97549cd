"""Live entries of manifests, cached: a manifest file is never changed once written.

One merge read every manifest of its table three times (planning, the commit's check that the inputs
are still live, and staging the rewritten manifests): on a table of 125 manifests that was about a
second of the commit (``python -m benchmarks.merge``). Entries are kept by manifest path (paths carry a
UUID and are never reused) up to :data:`MAX_ENTRIES` entries in all, least recently used out first.
Callers must not modify the entries they get.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestFile

from autooptimize.iceberg.v3 import manifest_first_row_id, read_entries

MAX_ENTRIES = 50_000

_lock = threading.Lock()
_cache: OrderedDict[str, list[ManifestEntry]] = OrderedDict()
_size = 0


def live_entries_of(manifest: ManifestFile, io: FileIO) -> list[ManifestEntry]:
    """``manifest.fetch_manifest_entry(io, discard_deleted=True)`` with the v3 fields kept and row ids
    inherited (autooptimize.iceberg.v3.read_entries), read once per process."""
    global _size
    path = f"{manifest.manifest_path}@{manifest_first_row_id(manifest)}"  # row ids inherit from the list
    with _lock:
        cached = _cache.get(path)
        if cached is not None:
            _cache.move_to_end(path)
            return cached
    entries = read_entries(manifest, io, discard_deleted=True)
    if len(entries) > MAX_ENTRIES // 4:  # one huge manifest would push out everything else
        return entries
    with _lock:
        if path not in _cache:
            _cache[path] = entries
            _size += len(entries)
            while _size > MAX_ENTRIES and _cache:
                _, dropped = _cache.popitem(last=False)
                _size -= len(dropped)
    return entries


def clear() -> None:
    global _size
    with _lock:
        _cache.clear()
        _size = 0
