"""Which partitions need attention (the health rule: excess over the best layout their bytes allow,
``domain.entropy.partition_needs_attention``) and handing them over to ``on_attention``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.partitions import format_human
from autooptimize.errors import InvalidArgument
from autooptimize.services.observe.common import ObserveReport, OnAttention, TrackedSettings
from autooptimize.storage.db import session_scope
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.observe_work import AttentionRow, attention_rows, pending_partitions
from autooptimize.storage.repositories import decision_failures, tracked_table
from autooptimize.storage.stats import (
    PartitionFigures,
    PartitionId,
    count_attention,
    partition_figures,
    partition_labels,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attention:
    """A partition whose MSE ≥ tolerance²; ``pending`` when an action is already queued or running on it."""

    table: str
    table_id: int
    spec_id: int
    partition_key: str
    n_files: int
    sse: int
    mse: float
    tolerance: int
    pending: bool


def attend(settings: Settings, identifier: str, info: TrackedSettings, touched: set[PartitionId],
           report: ObserveReport, on_attention: OnAttention | None,
           figures: dict[PartitionId, PartitionFigures] | None = None) -> None:
    """Hand changed partitions with MSE ≥ T², and partitions that received delete files, to
    ``on_attention``; count those skipped. ``figures``: the touched partitions' figures as just written
    (the health rule is then applied to them here, not read back from PostgreSQL)."""
    deletes = {tuple(p) for p in report.delete_partitions}
    if not touched and not deletes:
        return
    with session_scope(settings) as session:
        if figures is not None:
            rows = [AttentionRow(info.table_id, identifier, f.spec_id, f.partition_key, f.n_files, f.sse, info.tolerance)
                    for _, f in sorted(figures.items())
                    if info.enabled and f.needs_attention(info.target, info.tolerance)]
        else:
            rows = attention_rows(session, settings.catalog, table_id=info.table_id, partitions=touched)
        seen = {(r.spec_id, r.partition_key) for r in rows}
        rows += [AttentionRow(info.table_id, identifier, spec_id, key, 0, 0, info.tolerance)
                 for spec_id, key in sorted(deletes) if (spec_id, key) not in seen]
        pending = pending_partitions(session, [info.table_id]).get(info.table_id, set())
        report.needing_attention = len(rows)
        report.skipped_below_threshold = len(touched - {(r.spec_id, r.partition_key) for r in rows})
        report.skipped_pending = sum(1 for r in rows if None in pending or (r.spec_id, r.partition_key) in pending)
        # Counted as handed over before the hand-over: a crash in between loses it, and the sweep finds it.
        count_attention(session, info.table_id, enqueued=len(rows) - report.skipped_pending if on_attention else 0,
                        below_threshold=report.skipped_below_threshold, pending=report.skipped_pending)
    if on_attention is None:
        return
    for row in rows:
        if None in pending or (row.spec_id, row.partition_key) in pending:
            continue
        try:
            on_attention(info.table_id, row.spec_id, row.partition_key)
            report.enqueued += 1
        except Exception:  # one failed hand-off must not hide the others; the sweep retries it
            log.exception("table %s: enqueueing decide for %s failed", identifier, row.partition_key)
            report.enqueue_failed += 1


def partitions_needing_attention(settings: Settings, identifier: str | None = None) -> list[Attention]:
    """Partitions of enabled tracked tables (or of one table) whose stored MSE ≥ tolerance², worst first.

    Reads PostgreSQL only; ``pending`` marks those with a queued or running action. A periodic sweep
    enqueues the ones not pending, which also recovers hand-offs lost to a crash after a commit.
    """
    with session_scope(settings) as session:
        table_id = None
        if identifier is not None:
            row = tracked_table(session, settings.catalog, identifier)
            if row is None:
                raise InvalidArgument(f"table {identifier!r} is not tracked in catalog {settings.catalog!r}")
            table_id = row.id
        rows = attention_rows(session, settings.catalog, table_id=table_id)
        pending = pending_partitions(session, {r.table_id for r in rows})
    result = [
        Attention(
            table=r.identifier, table_id=r.table_id, spec_id=r.spec_id, partition_key=r.partition_key,
            n_files=r.n_files, sse=r.sse, mse=r.mse, tolerance=r.tolerance,
            pending=None in pending.get(r.table_id, set())
            or (r.spec_id, r.partition_key) in pending.get(r.table_id, set()),
        )
        for r in rows
    ]
    result.sort(key=lambda a: (-a.mse, a.table, a.spec_id, a.partition_key))
    return result


def sweep_attention(settings: Settings, on_attention: OnAttention, identifier: str | None = None) -> dict[str, int]:
    """Hand every partition with MSE ≥ T² and nothing pending to ``on_attention`` (the periodic sweep).

    Returns counts: ``enqueued``, ``pending`` (skipped: an action is queued or running) and ``failed``.
    """
    counts = {"enqueued": 0, "pending": 0, "failed": 0}
    for item in partitions_needing_attention(settings, identifier):
        if item.pending:
            counts["pending"] += 1
            continue
        try:
            on_attention(item.table_id, item.spec_id, item.partition_key)
            counts["enqueued"] += 1
        except Exception:  # the next sweep tries again
            log.exception("table %s: enqueueing decide for %s failed", item.table, item.partition_key)
            counts["failed"] += 1
    return counts


def observed_state(settings: Settings, identifier: str) -> dict[str, Any]:
    """What PostgreSQL holds for a table, without touching the catalog: the cursor and per-partition stats
    (worst MSE first). ``observed`` is False until the listener has seen the table once."""
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is None:
            raise InvalidArgument(f"table {identifier!r} is not tracked in catalog {settings.catalog!r}")
        cursor = session.get(TableCursor, row.id)
        figures = partition_figures(session, row.id)
        labels = partition_labels(session, row.id)
        failures = decision_failures(session, row.id)
        tolerance, target = row.tolerance, row.target_file_size
        state: dict[str, Any] = {
            "table": identifier,
            "observed": cursor is not None and cursor.target_file_size is not None,
            "snapshot_id": cursor.last_snapshot_id if cursor else None,
            "observed_at": cursor.observed_at.isoformat() if cursor and cursor.observed_at else None,
            "needs_scan": bool(cursor and cursor.needs_scan),
            "scan_reason": cursor.scan_reason if cursor else None,
            "snapshots_applied": cursor.snapshots_applied if cursor else 0,
            "scans": cursor.scans if cursor else 0,
            "attention_enqueued": cursor.attention_enqueued if cursor else 0,
            "skipped_below_threshold": cursor.skipped_below_threshold if cursor else 0,
            "skipped_pending": cursor.skipped_pending if cursor else 0,
            "last_error": cursor.last_error if cursor else None,
            "decision_failures": failures,
        }
    ordered = sorted(figures.values(), key=lambda f: (-f.mse, f.partition_key))
    partitions: list[dict[str, Any]] = [
        {
            "partition": format_human(list(labels.get((f.spec_id, f.partition_key), {}).items())),
            "partition_key": f.partition_key,
            "spec_id": f.spec_id,
            "n": f.n_files,
            "sse": f.sse,
            "mse": f.mse,
            "rmse_bytes": int(f.mse ** 0.5),
            "needs_attention": f.needs_attention(target, tolerance),
            "bytes": f.total_bytes,
            "small_files": f.small_files,
        }
        for f in ordered
    ]
    state.update(target_file_size=target, tolerance=tolerance, files=sum(f.n_files for f in ordered),
                 partitions=partitions)
    return state
