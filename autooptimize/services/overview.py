"""What the console and ``history`` show: tables with their health, a table's partitions and file-size
histograms, the action history with each action's cost, phases, before and after, and audit trail.

Read only. Health is one rule everywhere: a partition needs attention when its File Size Entropy exceeds
what its bytes allow by T² per file (``domain.entropy.partition_needs_attention``), so a partition
smaller than the target, merged into one file, is healthy; ``worst_ratio`` is the worst raw MSE over T².
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.histogram import power_of_two_edges, size_histogram
from autooptimize.errors import ActionNotFound, InvalidArgument
from autooptimize.iceberg.catalog import load_table
from autooptimize.services.actions import outcome_of
from autooptimize.services.budget import latest_decisions
from autooptimize.services.status import all_status, table_status
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable
from autooptimize.storage.readmodel import (
    REWRITE_KINDS,
    HistoryFilter,
    action_history,
    distinct_values,
    last_actions,
)
from autooptimize.storage.repositories import audit_events, get_action, tracked_table, tracked_tables

PHASES = ("plan", "rewrite", "commit", "total", "wall")  # the order timings are shown in
MAX_LIMIT = 500


def tables_overview(settings: Settings) -> list[dict[str, Any]]:
    """One entry per tracked table: files, small-file share, partitions needing attention, worst MSE
    against T², delete files (from the current snapshot's summary), failed decisions, last action."""
    lines = all_status(settings)
    with session_scope(settings) as session:
        tuning = {t.identifier: (t.target_file_size, t.tolerance) for t in tracked_tables(session, settings.catalog)}
        last = {name: _brief(a) for name, a in last_actions(session, settings.catalog).items()}
    out: list[dict[str, Any]] = []
    for line in lines:
        name = line["table"]
        target, tolerance = tuning.get(name, (settings.default_target_file_size, settings.tolerance_default))
        entry: dict[str, Any] = {"table": name, "target_file_size": target, "tolerance": tolerance,
                                 "last_action": last.get(name)}
        if "error" in line:
            out.append({**entry, "health": "error", "error": line["error"]})
            continue
        files = line["files"] or 0
        worst_ratio = (line["worst_mse"] or 0.0) / (tolerance * tolerance) if tolerance else None
        entry.update(
            health="attention" if line["needs_attention"] else "healthy",
            source=line["source"], snapshot_id=line["snapshot_id"], files=files, bytes=line["bytes"],
            partitions=line["partitions"], partitions_needing_attention=line["needs_attention"],
            small_files=line["small_files"], small_file_share=(line["small_files"] / files) if files else 0.0,
            worst_partition=line["worst_partition"], worst_mse=line["worst_mse"], worst_ratio=worst_ratio,
            delete_files=_delete_files(settings, name), decision_failures=line["decision_failures"],
            last_decision_failure=line["last_decision_failure"],
        )
        out.append(entry)
    return out


def table_detail(settings: Settings, identifier: str, *, actions: int = 10) -> dict[str, Any]:
    """A table now: partitions ranked by MSE, each with its file-size histogram, the whole table's
    histogram on the same buckets, and its latest actions with their before and after."""
    status = table_status(settings, identifier, with_sizes=True)
    tuning = status["tuning"] or {}
    target = int(tuning.get("target_file_size") or settings.default_target_file_size)
    tolerance = int(tuning.get("tolerance") or settings.tolerance_default)
    every = [s for p in status["partitions"] for s in p["sizes"]]
    edges = power_of_two_edges(every, target)
    whole = size_histogram(every, edges)
    partitions = []
    for p in status["partitions"]:
        sizes = p.pop("sizes")
        hist = size_histogram(sizes, edges)
        partitions.append({**p, "mse_ratio": p["mse"] / (tolerance * tolerance) if tolerance else None,
                           "histogram": {"counts": list(hist.counts), "bytes": list(hist.bytes)}})
    history = action_list(settings, HistoryFilter(table=identifier, limit=actions))
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        suggestion = dict(row.suggested_tuning) if row is not None and row.suggested_tuning else None
        if suggestion is not None and row is not None and row.suggested_at is not None:
            suggestion["at"] = row.suggested_at.isoformat()
    return {
        "table": identifier, "tracked": status["tracked"], "tuning": status["tuning"],
        "target_file_size": target, "tolerance": tolerance, "threshold_mse": tolerance * tolerance,
        "snapshot_id": status["snapshot_id"], "files": status["files"], "bytes": sum(every),
        "small_files": sum(p["small_files"] for p in partitions),
        "delete_files": sum(p["delete_files"] for p in partitions),
        "partitions_needing_attention": sum(1 for p in partitions if p["needs_attention"]),
        "decision_failures": status["decision_failures"],
        "histogram": whole.as_dict(), "partitions": partitions, "actions": history["actions"],
        "suggested_tuning": suggestion, "budget": _budget_of(settings, row.id if row is not None else None),
    }


def _budget_of(settings: Settings, table_id: int | None) -> dict[str, Any]:
    """The budget's latest verdict per partition of the table (value, estimated cost, verdict)."""
    decisions = list(latest_decisions(settings, table_id).values()) if table_id is not None else []
    return {"core_seconds_per_hour": settings.budget_core_seconds_per_hour, "mode": settings.budget_mode,
            "decisions": sorted(decisions, key=lambda d: -(d["value_per_cost"] or 0))}


def action_list(settings: Settings, where: HistoryFilter) -> dict[str, Any]:
    """The history matching ``where`` (newest first): each action with its cost, phases and before/after."""
    if not 1 <= where.limit <= MAX_LIMIT or where.offset < 0:
        raise InvalidArgument(f"limit must be 1..{MAX_LIMIT} and offset ≥ 0 (got limit={where.limit}, "
                              f"offset={where.offset})")
    with session_scope(settings) as session:
        rows, total = action_history(session, settings.catalog, where)
        views = [action_view(action, tracked) for action, tracked in rows]
        choices = distinct_values(session)
    return {"total": total, "limit": where.limit, "offset": where.offset, "actions": views, "choices": choices}


def action_detail(settings: Settings, action_id: str) -> dict[str, Any]:
    """One action: its view (see :func:`action_view`), its options and its audit trail, oldest first."""
    with session_scope(settings) as session:
        action = get_action(session, action_id)
        if action is None:
            raise ActionNotFound(f"no action with id {action_id!r}")
        view = action_view(action, session.get(TrackedTable, action.table_id))
        view["options"] = action.options
        view["audit"] = [{"id": e.id, "at": e.at.isoformat() if e.at else None, "event": e.event, "detail": e.detail}
                         for e in audit_events(session, action_id)]
    return view


def action_view(action: Action, tracked: TrackedTable | None) -> dict[str, Any]:
    """An action as the history shows it: the outcome's fields, its cost (seconds, bytes read and
    written), its phases in seconds, commit conflicts, and before/after from its recorded plan."""
    view = outcome_of(action, tracked.identifier if tracked else None)
    target = (action.options or {}).get("target_file_size") or (tracked.target_file_size if tracked else None)
    view["target_file_size"] = int(target) if target else None
    plan = view.pop("plan") or {}
    timings = dict(action.timings or {})
    view["phases"] = {k: timings[k] for k in (*PHASES, *sorted(set(timings) - set(PHASES))) if k in timings}
    view["started_at"] = action.started_at.isoformat() if action.started_at else None
    view["commit_conflicts"] = int((plan.get("commit") or {}).get("conflicts") or 0)
    view["before_after"] = before_after(action, view["target_file_size"])
    return view


def before_after(action: Action, target: int | None = None) -> dict[str, Any] | None:
    """The files an action replaced and the files it wrote (or planned to write), on shared buckets
    that reach ``target`` (the action's target file size).

    ``before`` comes from the recorded plan (each group's input sizes; for plans recorded before sizes
    were, each group's bytes spread over its files: ``before_source`` is then ``plan_estimate``).
    ``after`` is measured from the checkpointed output sizes once committed, else the plan's estimate.
    None for an action without a rewrite plan (table hygiene, not yet planned).
    """
    plan = action.plan or {}
    # a rewrite's plan lists partitions with groups; table hygiene records other shapes (counts)
    listed = plan.get("partitions")
    partitions = [p for p in (listed if isinstance(listed, list) else ())
                  if isinstance(p, dict) and isinstance(p.get("groups"), list)]
    groups = [g for p in partitions for g in p["groups"] if isinstance(g, dict)]
    if not groups:
        return None
    before: list[int] = []
    exact = True
    for g in groups:
        if g.get("sizes") is not None:
            before += [int(s) for s in g["sizes"]]
        else:
            exact = False
            before += _spread(int(g.get("bytes_in") or 0), len(g.get("files") or ()))
    outputs = [int(s) for g in (action.checkpoint or {}).get("groups") or () for s in g.get("output_sizes") or ()]
    measured = bool(outputs) and action.committed_snapshot_id is not None
    after = outputs if measured else [s for g in groups for s in _spread(int(g.get("bytes_out_estimate") or 0),
                                                                           int(g.get("files_out") or 0))]
    edges = power_of_two_edges(before + after, target)
    b, a = size_histogram(before, edges), size_histogram(after, edges)
    return {"edges": list(edges), "labels": b.as_dict()["labels"],
            "before": {"counts": list(b.counts), "bytes": list(b.bytes), "files": b.files},
            "after": {"counts": list(a.counts), "bytes": list(a.bytes), "files": a.files},
            "before_source": "plan" if exact else "plan_estimate",
            "after_source": "measured" if measured else "plan_estimate",
            "partitions": [{"partition": p.get("partition_human"), "mse_before": p.get("mse_before"),
                            "mse_after": p.get("mse_after"), "files_in": p.get("files_in"),
                            "files_out": p.get("files_out")} for p in partitions]}


def action_progress(settings: Settings, action_id: str) -> dict[str, Any]:
    """Where a running action is, from what it has recorded: ``phase`` (queued, planning, rewriting,
    committing, or its final state), attempt, groups checkpointed and their input bytes, seconds since
    it started."""
    with session_scope(settings) as session:
        action = get_action(session, action_id)
        if action is None:
            raise ActionNotFound(f"no action with id {action_id!r}")
        state = ActionState(action.state)
        checkpoint = action.checkpoint or {}
        groups = checkpoint.get("groups") or []
        if state.terminal:
            phase = state.value
        elif state is ActionState.QUEUED:
            phase = "queued"
        elif action.kind not in REWRITE_KINDS:  # table hygiene records no phases on the way
            phase = "running"
        elif "dirs" not in checkpoint or action.started_at is None:
            phase = "planning"
        elif groups and not checkpoint.get("partial"):
            phase = "committing"
        else:
            phase = "rewriting"
        started = action.started_at
        return {"id": action.id, "state": state.value, "phase": phase, "attempt": action.attempts,
                "groups_done": len(groups), "bytes_done": sum(int(g.get("bytes_in") or 0) for g in groups),
                "partitions": len(checkpoint.get("dirs") or ()),
                "seconds": (datetime.now(UTC) - started).total_seconds() if started and not state.terminal
                else None}


def _brief(action: Action) -> dict[str, Any]:
    return {"id": action.id, "kind": action.kind, "state": action.state, "reason": action.reason,
            "at": (action.finished_at or action.created_at).isoformat() if action.created_at else None}


def _spread(total: int, files: int) -> list[int]:
    """``total`` bytes over ``files`` files as evenly as integers allow."""
    if files <= 0:
        return []
    size, extra = divmod(total, files)
    return [size + 1 if i < extra else size for i in range(files)]


def _delete_files(settings: Settings, identifier: str) -> int | None:
    """Live delete files by the current snapshot's summary (one metadata read), None if unknown."""
    try:
        snapshot = load_table(settings, identifier).current_snapshot()
    except Exception:  # the table's other figures still show; the page marks this one unknown
        return None
    if snapshot is None or snapshot.summary is None:
        return 0
    value = snapshot.summary.get("total-delete-files")
    return int(value) if value is not None else None
