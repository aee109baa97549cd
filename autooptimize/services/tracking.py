"""Tracking a table: validated per-table tuning stored in PostgreSQL.

A table is tracked only when someone asks (``track``, an action submitted for it, or AO_AUTO_TRACK);
reading it (status, explain, scan, a dry run) never tracks it. The actions a tracked table allows
start at :data:`DEFAULT_ACTIONS`: the rewrites and the manifest rewrite, which keep every snapshot and
file. The destructive hygiene (:data:`DESTRUCTIVE_ACTIONS`: expiring snapshots, removing orphan files)
is off until allowed per table (``track T --allow expire_snapshots,remove_orphans``).
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain.checks import bounded_float, bounded_int
from autooptimize.domain.fairness.tenants import check_tenant
from autooptimize.domain.sizes import parse_size
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import get_catalog, load_table
from autooptimize.services.kinds import KINDS
from autooptimize.services.sort import parse_sort_order
from autooptimize.services.zorder import parse_zorder_columns
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog, TrackedTable
from autooptimize.storage.repositories import audit, tracked_table

log = logging.getLogger(__name__)

ACTION_KINDS = tuple(KINDS)
#: Hygiene that deletes: expired snapshots can no longer be read, removed files are gone.
DESTRUCTIVE_ACTIONS = ("expire_snapshots", "remove_orphans")
#: What a newly tracked table allows: every kind but the destructive ones.
DEFAULT_ACTIONS = tuple(k for k in ACTION_KINDS if k not in DESTRUCTIVE_ACTIONS)
TUNING_FIELDS = (
    "target_file_size", "tolerance", "min_input_files", "priority_class", "weight", "sort_order",
    "zorder_columns", "allowed_actions", "max_bytes_per_action", "min_interval_seconds", "enabled",
    "merge_fan_in", "cold_after_seconds", "leave_alone_below", "quiet_merge", "auto_tune", "tenant",
    "cold_gap_factor", "merge_price", "cold_absorb",
)
#: Changes to the allowed actions relative to what the table allows now (``track --allow/--disallow``).
RELATIVE_FIELDS = ("allow", "disallow")


@dataclass(frozen=True)
class TableTuning:
    target_file_size: int
    tolerance: int
    min_input_files: int
    priority_class: str
    weight: int
    sort_order: str | None
    zorder_columns: str | None
    allowed_actions: tuple[str, ...]
    max_bytes_per_action: int | None
    min_interval_seconds: int
    enabled: bool
    # the live-partition policy's tuning (None: the service's AO_MERGE_FAN_IN / AO_COLD_AFTER_SECONDS /
    # merge everything); ``auto_tune``: AutoAnalyze may set them from the table's own history
    merge_fan_in: int | None = None
    cold_after_seconds: float | None = None
    leave_alone_below: int | None = None
    quiet_merge: bool | None = None
    auto_tune: bool = False
    # the tenant it is shared under in the fair dispatch (None: its namespace's first level)
    tenant: str | None = None
    # a partition is cold after this many times its recent gaps between writes (None: AO_COLD_GAP_FACTOR)
    cold_gap_factor: float | None = None
    # the priced live rule's price (None: AO_MERGE_PRICE; 0: the tiers; autooptimize.domain.priced)
    merge_price: int | None = None
    # the cold finish gives its remainder a home (None: AO_COLD_ABSORB; autooptimize.domain.remainder)
    cold_absorb: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["allowed_actions"] = list(self.allowed_actions)
        return d


def size_arg(name: str, value: Any) -> int:
    """A positive size from an int or a string like ``64MiB``; InvalidArgument otherwise."""
    size = parse_size(value, name)
    if size <= 0:
        raise InvalidArgument(f"{name} must be a positive size such as 128MiB (got {value!r})")
    return size


def action_kinds(name: str, value: Any) -> list[str]:
    """Action kinds from ``"merge,sort"`` or a list; InvalidArgument names an unknown one and the valid."""
    if isinstance(value, str):
        value = [a.strip() for a in value.split(",") if a.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
        raise InvalidArgument(f"{name} must be comma-separated action kinds from {', '.join(ACTION_KINDS)} "
                              f"(got {value!r})")
    bad = [a for a in value if a not in ACTION_KINDS]
    if bad:
        raise InvalidArgument(f"{name} names {', '.join(map(repr, bad))}; valid: {', '.join(ACTION_KINDS)}")
    return list(value)


def _allowed(merged: dict[str, Any], allow: Any, disallow: Any) -> tuple[str, ...]:
    actions = action_kinds("allowed_actions", merged["allowed_actions"])
    if allow is not None:
        actions += [a for a in action_kinds("allow", allow) if a not in actions]
    if disallow is not None:
        dropped = set(action_kinds("disallow", disallow))
        actions = [a for a in actions if a not in dropped]
    if not actions:
        raise InvalidArgument(f"allowed_actions would be empty; allow at least one of {', '.join(ACTION_KINDS)} "
                              "(to stop all actions on the table, disable it instead)")
    return tuple(dict.fromkeys(actions))


def validate_tuning(settings: Settings, current: TableTuning | None, table: Any, **changes: Any) -> TableTuning:
    """Merge ``changes`` into ``current`` (or the defaults) and validate every field. ``allow`` and
    ``disallow`` add action kinds to, or remove them from, the allowed ones (after ``allowed_actions``)."""
    unknown = sorted(set(changes) - set(TUNING_FIELDS) - set(RELATIVE_FIELDS))
    if unknown:
        raise InvalidArgument(f"unknown tuning option(s) {', '.join(unknown)}; valid: "
                              f"{', '.join(TUNING_FIELDS + RELATIVE_FIELDS)}")
    allow, disallow = changes.pop("allow", None), changes.pop("disallow", None)
    base = current.as_dict() if current else {
        "target_file_size": settings.default_target_file_size,
        "tolerance": None,
        "min_input_files": 2,
        "priority_class": "normal" if "normal" in settings.priority_classes else settings.priority_classes[0],
        "weight": 1,
        "sort_order": None,
        "zorder_columns": None,
        "allowed_actions": list(DEFAULT_ACTIONS),
        "max_bytes_per_action": None,
        "min_interval_seconds": 0,
        "enabled": True,
        "merge_fan_in": None,
        "cold_after_seconds": None,
        "leave_alone_below": None,
        "quiet_merge": None,
        "auto_tune": False,
        "tenant": None,
        "cold_gap_factor": None,
        "merge_price": None,
        "cold_absorb": None,
    }
    merged = {**base, **{k: v for k, v in changes.items() if v is not None}}
    target = size_arg("target_file_size", merged["target_file_size"])
    tolerance = merged["tolerance"]
    tolerance = target // 4 if tolerance is None else size_arg("tolerance", tolerance)
    if tolerance > target:
        raise InvalidArgument(f"tolerance ({tolerance} bytes) must not exceed target_file_size ({target} bytes)")
    priority = merged["priority_class"]
    if not isinstance(priority, str) or priority not in settings.priority_classes:
        raise InvalidArgument(
            f"priority_class {priority!r} is not one of {', '.join(settings.priority_classes)}"
        )
    actions = _allowed(merged, allow, disallow)
    sort_order = merged["sort_order"]
    if sort_order is not None and not isinstance(sort_order, str):
        raise InvalidArgument(f"sort_order must be comma-separated column names (got {sort_order!r})")
    if not isinstance(merged["enabled"], bool):
        raise InvalidArgument(f"enabled must be true or false (got {merged['enabled']!r})")
    if sort_order:
        sort_order = ", ".join(c.spec() for c in parse_sort_order(table, sort_order))
    zorder_columns = merged["zorder_columns"]
    if zorder_columns:  # stored as validated: "a, b"

        zorder_columns = ", ".join(c.name for c in parse_zorder_columns(table, zorder_columns))
    max_bytes = merged["max_bytes_per_action"]
    fan_in = merged["merge_fan_in"]
    cold_after = merged["cold_after_seconds"]
    if cold_after is not None:
        cold_after = bounded_float(cold_after, 0, 86400, "cold_after_seconds must be seconds from 0 to 86400")
    leave_alone = merged["leave_alone_below"]
    gap_factor = merged["cold_gap_factor"]
    if gap_factor is not None:
        gap_factor = bounded_float(gap_factor, 0, 1000, "cold_gap_factor must be a number from 0 (off) to 1000")
    price = merged["merge_price"]
    if price is not None:
        price = bounded_int("merge_price", price, 0, 1_000_000)
    for flag in ("quiet_merge", "cold_absorb"):
        if merged[flag] is not None and not isinstance(merged[flag], bool):
            raise InvalidArgument(f"{flag} must be true or false (got {merged[flag]!r})")
    if not isinstance(merged["auto_tune"], bool):
        raise InvalidArgument(f"auto_tune must be true or false (got {merged['auto_tune']!r})")
    tenant = merged["tenant"]  # "" resets it to the namespace's first level
    tenant = check_tenant("tenant", tenant) if tenant != "" and tenant is not None else None
    return TableTuning(
        target_file_size=target,
        tolerance=tolerance,
        min_input_files=bounded_int("min_input_files", merged["min_input_files"], 2),
        priority_class=priority,
        weight=bounded_int("weight", merged["weight"], 1),
        sort_order=sort_order or None,
        zorder_columns=zorder_columns or None,
        allowed_actions=actions,
        max_bytes_per_action=None if max_bytes is None else size_arg("max_bytes_per_action", max_bytes),
        min_interval_seconds=bounded_int("min_interval_seconds", merged["min_interval_seconds"], 0),
        enabled=merged["enabled"],
        merge_fan_in=None if fan_in is None else bounded_int("merge_fan_in", fan_in, 2, 1000),
        cold_after_seconds=cold_after,
        leave_alone_below=None if leave_alone is None else parse_size(leave_alone, "leave_alone_below"),
        quiet_merge=merged["quiet_merge"],
        auto_tune=merged["auto_tune"],
        tenant=tenant,
        cold_gap_factor=gap_factor,
        merge_price=price,
        cold_absorb=merged["cold_absorb"],
    )


def tuning_of(row: TrackedTable) -> TableTuning:
    return TableTuning(
        target_file_size=row.target_file_size, tolerance=row.tolerance, min_input_files=row.min_input_files,
        priority_class=row.priority_class, weight=row.weight, sort_order=row.sort_order,
        zorder_columns=row.zorder_columns, allowed_actions=tuple(row.allowed_actions), max_bytes_per_action=row.max_bytes_per_action,
        min_interval_seconds=row.min_interval_seconds, enabled=row.enabled,
        merge_fan_in=row.merge_fan_in, cold_after_seconds=row.cold_after_seconds,
        leave_alone_below=row.leave_alone_below, quiet_merge=row.quiet_merge, auto_tune=bool(row.auto_tune),
        tenant=row.tenant, cold_gap_factor=row.cold_gap_factor, merge_price=row.merge_price,
        cold_absorb=row.cold_absorb,
    )


def track(settings: Settings, identifier: str, **tuning: Any) -> dict[str, Any]:
    """Start (or update) tracking ``identifier``; returns the stored tuning. Validates before writing."""
    table = load_table(settings, identifier)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        new = validate_tuning(settings, tuning_of(row) if row else None, table, **tuning)
        if row is None:
            row = TrackedTable(catalog=settings.catalog, identifier=identifier, **new.as_dict())
            session.add(row)
            session.flush()
            audit(session, "table.tracked", table_id=row.id, identifier=identifier, tuning=new.as_dict())
        else:
            for key, value in new.as_dict().items():
                setattr(row, key, value)
            session.flush()
            audit(session, "table.tuned", table_id=row.id, identifier=identifier, tuning=new.as_dict())
        return {"table": identifier, "id": row.id, **new.as_dict()}


#: The audit events that set a tracked table's tuning (``track``, auto-tracking, AutoAnalyze applying one).
TUNING_EVENTS = ("table.tracked", "table.tuned", "table.auto_tuned")


def tuning_in_force_since(session: Session, row: TrackedTable) -> datetime | None:
    """Since when ``row``'s tuning has been in force and last looked at: the later of its last suggestion
    (``suggested_at``) and the newest audit event that set its tuning (:data:`TUNING_EVENTS`); None when
    neither is on record (the audit log's retention may have dropped the event). AutoAnalyze checks its
    replay against what the table did since then (``autotune.check_prediction``): the whole time the
    tuning now in force has run, and no earlier than the previous suggestion."""
    newest = session.scalar(select(func.max(AuditLog.at)).where(AuditLog.table_id == row.id,
                                                                 AuditLog.event.in_(TUNING_EVENTS)))
    times = [t for t in (row.suggested_at, newest) if t is not None]
    return max(times) if times else None


def ensure_tracked(settings: Settings, identifier: str) -> int:
    """The tracked-table id, tracking with default tuning first when needed."""
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is not None:
            return row.id
    try:
        return int(track(settings, identifier)["id"])
    except IntegrityError:  # a concurrent submission tracked it first: take its row
        with session_scope(settings) as session:
            row = tracked_table(session, settings.catalog, identifier)
            if row is None:
                raise
            return row.id


def _listed_tables(catalog: Any, patterns: tuple[str, ...]) -> list[str]:
    """The tables of every namespace some pattern can match (a pattern's namespace part is all before its
    last dot). A namespace the catalog refuses to list (another engine's malformed name, one dropped
    meanwhile) is skipped with a warning: it must not stop the others from being tracked."""
    spaces = [p.rsplit(".", 1)[0] for p in patterns]
    names: list[str] = []
    for namespace in catalog.list_namespaces():
        if not any(fnmatch.fnmatchcase(".".join(namespace), space) for space in spaces):
            continue
        try:
            names += [".".join(ident) for ident in catalog.list_tables(namespace)]
        except Exception as exc:
            log.warning("auto-track: namespace %r not listed (%s: %s)", ".".join(namespace), type(exc).__name__, exc)
    return names


def auto_track(settings: Settings, *, batch: int = 500) -> list[str]:
    """Track, with default tuning, every catalog table matching AO_AUTO_TRACK that is not tracked yet.

    Opt-in: with no patterns nothing is listed. Returns the identifiers newly tracked. The catalog has just
    listed the tables, so none is loaded: the default tuning is validated once and the new rows go in
    ``batch`` at a time (a table tracked meanwhile by someone else is left as it is).
    """
    patterns = settings.auto_track_patterns
    if not patterns:
        return []
    catalog = get_catalog(settings)
    with session_scope(settings) as session:  # the identifiers only: runs every few seconds over the estate
        known = set(session.scalars(select(TrackedTable.identifier).where(TrackedTable.catalog == settings.catalog)))
    wanted = sorted(name for name in _listed_tables(catalog, patterns)
                    if name not in known and any(fnmatch.fnmatchcase(name, p) for p in patterns))
    if not wanted:
        return []
    tuning = validate_tuning(settings, None, None).as_dict()
    added: list[str] = []
    for start in range(0, len(wanted), batch):
        with session_scope(settings) as session:
            rows = session.execute(
                insert(TrackedTable)
                .values([{"catalog": settings.catalog, "identifier": name, **tuning}
                         for name in wanted[start:start + batch]])
                .on_conflict_do_nothing(index_elements=["catalog", "identifier"])
                .returning(TrackedTable.id, TrackedTable.identifier)).all()
            for table_id, name in rows:
                audit(session, "table.tracked", table_id=table_id, identifier=name, tuning=tuning)
                audit(session, "table.auto_tracked", table_id=table_id, identifier=name, patterns=list(patterns))
        added += sorted(name for _, name in rows)
    return added
