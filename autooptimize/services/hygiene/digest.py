"""The live-content digest the hygiene actions check before and after they commit."""

from __future__ import annotations

import hashlib

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from autooptimize.iceberg.references import normalise_path


def live_digest(table: Table, snapshot: Snapshot | None) -> tuple[int, int, str]:
    """Files, rows and a digest of the live data and delete files of ``snapshot`` (path, rows, size)."""
    if snapshot is None:
        return 0, 0, hashlib.sha256().hexdigest()[:32]
    items = sorted(
        (normalise_path(str(e.data_file.file_path)), int(e.data_file.record_count), int(e.data_file.file_size_in_bytes))
        for m in snapshot.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    )
    digest = hashlib.sha256("\n".join(f"{p}\t{r}\t{s}" for p, r, s in items).encode()).hexdigest()[:32]
    return len(items), sum(r for _, r, _ in items), digest
