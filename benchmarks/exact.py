"""The check behind every listener benchmark: a table's rolling stats equal a full recomputation from its
current snapshot (N and SSE per partition, exact integers), and its cursor stands at that snapshot."""

from __future__ import annotations

from collections.abc import Iterable

from autooptimize.config import Settings
from autooptimize.domain.entropy import squared_error
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.storage.db import session_scope
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.repositories import tracked_table
from autooptimize.storage.stats import partition_figures


def stats_mismatches(settings: Settings, names: Iterable[str], target: int) -> list[str]:
    """One line per table of ``names`` whose stored stats (for ``target``) or cursor are not exact."""
    found = []
    for name in names:
        table = load_table(settings, name)
        snapshot = table.current_snapshot()
        exact = {}
        for key, pf in live_partitions(table).items():
            sizes = [f.size for f in pf.data_files]
            exact[key] = (len(sizes), sum(squared_error(s, target) for s in sizes))
        with session_scope(settings) as session:
            row = tracked_table(session, settings.catalog, name)
            if row is None:
                found.append(f"{name}: not tracked")
                continue
            stored = {k: (f.n_files, f.sse) for k, f in partition_figures(session, row.id).items()}
            cursor = session.get(TableCursor, row.id)
            at = cursor.last_snapshot_id if cursor is not None else None
        if stored != exact:
            found.append(f"{name}: rolling stats {stored} differ from a full recomputation {exact}")
        elif snapshot is not None and at != snapshot.snapshot_id:
            found.append(f"{name}: cursor at {at}, the table at {snapshot.snapshot_id}")
    return found
