"""What a table looks like now: File Size Entropy per partition (exact, from the current snapshot)
and the latest actions."""

from __future__ import annotations

from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.entropy import EntropyStats, partition_needs_attention
from autooptimize.errors import TableRefused
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.services.actions import outcome_of
from autooptimize.services.observe.attention import observed_state
from autooptimize.services.table_refusals import note_refused, refused_view
from autooptimize.services.tracking import tuning_of
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import decision_failures, recent_actions, tracked_table, tracked_tables


def table_status(settings: Settings, identifier: str, *, with_sizes: bool = False) -> dict[str, Any]:
    """Partitions ranked by MSE (worst first) with N, SSE, bytes, small files and last action; with
    ``with_sizes`` each partition also lists its live data files' sizes (``sizes``)."""
    try:
        table = load_table(settings, identifier)
        found = live_partitions(table)
    except TableRefused as refused:
        return {**refused_view(identifier, note_refused(settings, identifier, refused)),
                "tracked": _is_tracked(settings, identifier), "files": 0, "recent_actions": []}
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        tuning = tuning_of(row).as_dict() if row else None
        actions = [outcome_of(a, identifier) for a in recent_actions(session, row.id, 200)] if row else []
        failures = decision_failures(session, row.id) if row else {"count": 0, "last_reason": None}
    target = tuning["target_file_size"] if tuning else settings.default_target_file_size
    tolerance = tuning["tolerance"] if tuning else settings.tolerance_default
    last_by_partition: dict[str | None, dict[str, Any]] = {}
    for a in actions:  # newest first
        last_by_partition.setdefault(a["partition_key"], a)
    partitions: list[dict[str, Any]] = []
    for pf in found.values():
        sizes = [f.size for f in pf.data_files]
        stats = EntropyStats.from_sizes(sizes, target)
        last = last_by_partition.get(pf.key) or last_by_partition.get(None)
        partitions.append({
            "partition": pf.human,
            "partition_key": pf.key,
            "spec_id": pf.spec_id,
            "n": stats.n,
            "sse": stats.sse,
            "mse": stats.mse,
            "rmse_bytes": int(stats.mse ** 0.5),
            "needs_attention": partition_needs_attention(stats.sse, stats.n, sum(1 for s in sizes if s < target),
                                                         sum(s for s in sizes if s < target), target, tolerance),
            "bytes": sum(sizes),
            "rows": sum(f.record_count for f in pf.data_files),
            "small_files": sum(1 for s in sizes if s < target),
            "delete_files": len(pf.delete_files),
            **({"sizes": sizes} if with_sizes else {}),
            "last_action": None if last is None else {
                "id": last["id"], "kind": last["kind"], "state": last["state"], "at": last["finished_at"]
                or last["created_at"]},
        })
    partitions.sort(key=lambda p: (-p["mse"], p["partition_key"]))
    snapshot = table.current_snapshot()
    return {
        "table": identifier,
        "tracked": row is not None,
        "tuning": tuning,
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "files": sum(p["n"] for p in partitions),
        "decision_failures": failures,
        "partitions": partitions,
        "recent_actions": [{k: a[k] for k in ("id", "state", "reason", "partition", "files_in", "files_out",
                                              "snapshot_id", "created_at")} for a in actions[:10]],
    }


def _is_tracked(settings: Settings, identifier: str) -> bool:
    with session_scope(settings) as session:
        return tracked_table(session, settings.catalog, identifier) is not None


def all_status(settings: Settings) -> list[dict[str, Any]]:
    """One line per tracked table with its worst partition.

    A table the listener keeps current is read from PostgreSQL alone (``source: listener``: no catalog
    or manifest reads, so this stays fast for many large tables); a table not observed yet, or marked
    for a rescan, is computed from its current snapshot (``source: snapshot``).
    """
    with session_scope(settings) as session:
        names = [r.identifier for r in tracked_tables(session, settings.catalog)]
    lines: list[dict[str, Any]] = []
    for name in names:
        try:
            st = observed_state(settings, name)
            source = "listener"
            if not st["observed"] or st["needs_scan"]:
                st, source = table_status(settings, name), "snapshot"
        except Exception as exc:  # one broken table must not hide the others
            lines.append({"table": name, "error": str(exc)})
            continue
        if st.get("refused"):  # left untouched as a whole: no partitions to rank, and why
            refused = st["refused"]
            lines.append({"table": name, "refused": refused,
                          "error": f"refused ({refused['reason']}): {refused['message']}"})
            continue
        worst = st["partitions"][0] if st["partitions"] else None
        lines.append({
            "table": name,
            "source": source,
            "snapshot_id": st["snapshot_id"],
            "files": st["files"],
            "bytes": sum(p["bytes"] for p in st["partitions"]),
            "small_files": sum(p["small_files"] for p in st["partitions"]),
            "partitions": len(st["partitions"]),
            "worst_partition": worst and worst["partition"],
            "worst_mse": worst and worst["mse"],
            "worst_small_files": worst and worst["small_files"],
            "needs_attention": sum(1 for p in st["partitions"] if p["needs_attention"]),
            "decision_failures": st["decision_failures"]["count"],
            "last_decision_failure": st["decision_failures"]["last_reason"],
        })
    return lines
