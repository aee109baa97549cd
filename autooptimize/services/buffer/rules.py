"""A buffered table's rules (stored overrides over the settings' defaults) and its status.

The pure rule evaluation lives in autooptimize.domain.buffer_rules; this module reads and writes the rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain.buffer_rules import BufferLevel, BufferRules, evaluate
from autooptimize.domain.checks import bounded_int, check_callback_url
from autooptimize.domain.durations import parse_duration
from autooptimize.domain.sizes import parse_size
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import load_table, parse_identifier
from autooptimize.redact import redact
from autooptimize.storage.buffer_models import BufferBatch, BufferFile, BufferTable, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit


def ensure_buffer_table(settings: Settings, identifier: str) -> int:
    """The buffer-table id of ``identifier``, creating its row (default rules) if needed."""
    with session_scope(settings) as session:
        session.execute(insert(BufferTable).values(catalog=settings.catalog, identifier=identifier)
                        .on_conflict_do_nothing(index_elements=["catalog", "identifier"]))
        return int(session.scalars(select(BufferTable.id).where(
            BufferTable.catalog == settings.catalog, BufferTable.identifier == identifier)).one())


def rules_of(settings: Settings, row: BufferTable) -> BufferRules:
    return BufferRules(
        max_age_seconds=row.max_age_seconds or settings.buffer_max_age_seconds,
        min_bytes=row.min_bytes if row.min_bytes is not None else settings.buffer_min_bytes,
        max_bytes=row.max_bytes or settings.buffer_max_bytes,
        max_files=row.max_files or settings.buffer_max_files,
        combinable=row.combinable,
    )


def buffer_level(session: Session, table_id: int) -> BufferLevel:
    files, size, oldest = session.execute(
        select(func.count(), func.coalesce(func.sum(BufferFile.bytes), 0), func.min(BufferFile.arrived_at))
        .where(BufferFile.buffer_table_id == table_id, BufferFile.state == FileState.BUFFERED.value)
    ).one()
    age = None if oldest is None else max(0.0, (_db_now(session) - oldest).total_seconds())
    return BufferLevel(int(files), int(size), age)


def _db_now(session: Session) -> datetime:
    return session.execute(select(func.now())).scalar_one()


_OVERRIDES = ("max_age_seconds", "min_bytes", "max_bytes", "max_files", "callback_url")


def check_rules(max_age: Any = None, min_bytes: Any = None, max_bytes: Any = None, max_files: Any = None,
                callback_url: str | None = None, combinable: bool | None = None) -> dict[str, Any]:
    """The validated rule changes (column name to value; None leaves a rule out); InvalidArgument names
    the first bad one and what is valid."""
    changes: dict[str, Any] = {}
    if max_age is not None:
        changes["max_age_seconds"] = parse_duration(max_age, "max-age")
        if changes["max_age_seconds"] <= 0:
            raise InvalidArgument(f"max-age must be a positive duration such as 90s, 15m or 2h (got {max_age!r})")
    if min_bytes is not None:
        changes["min_bytes"] = parse_size(min_bytes, "min-bytes")
    if max_bytes is not None:
        changes["max_bytes"] = parse_size(max_bytes, "max-bytes")
        if changes["max_bytes"] <= 0:
            raise InvalidArgument(f"max-bytes must be a positive size such as 1GiB (got {max_bytes!r})")
    if max_files is not None:
        changes["max_files"] = bounded_int("max-files", max_files, 1)
    if callback_url is not None:
        changes["callback_url"] = check_callback_url(callback_url) or None
    if combinable is not None:
        if not isinstance(combinable, bool):
            raise InvalidArgument(f"combinable must be true or false (got {combinable!r})")
        changes["combinable"] = combinable
    return changes


def set_rules(settings: Settings, identifier: str, *, max_age: Any = None, min_bytes: Any = None,
              max_bytes: Any = None, max_files: Any = None, combinable: bool | None = None,
              callback_url: str | None = None, reset: bool = False) -> dict[str, Any]:
    """Set a table's rules (None leaves a rule as it is; ``reset`` returns all to the defaults).
    Everything, the resulting rules' consistency included, is validated before anything is written."""
    parse_identifier(identifier)
    changes = check_rules(max_age, min_bytes, max_bytes, max_files, callback_url, combinable)
    load_table(settings, identifier)
    with session_scope(settings) as session:
        current = session.scalars(select(BufferTable).where(
            BufferTable.catalog == settings.catalog, BufferTable.identifier == identifier)).one_or_none()
        kept = {} if reset or current is None else {n: getattr(current, n) for n in (*_OVERRIDES, "combinable")}
    try:
        rules_of(settings, BufferTable(**{"combinable": True, **kept, **changes}))
    except ValueError as exc:
        raise InvalidArgument(f"rules of {identifier} are inconsistent: {exc}") from None
    table_id = ensure_buffer_table(settings, identifier)
    with session_scope(settings) as session:
        row = session.get(BufferTable, table_id, with_for_update=True)
        assert row is not None
        if reset:
            for name in _OVERRIDES:
                setattr(row, name, None)
            row.combinable = True
        for name, value in changes.items():
            setattr(row, name, value)
        try:
            rules = rules_of(settings, row)
        except ValueError as exc:  # a concurrent change since the check above
            raise InvalidArgument(f"rules of {identifier} are inconsistent: {exc}") from None
        audit(session, "buffer.rules_set", table=identifier, **changes, reset=reset)  # audit() redacts
        return _rules_view(row, rules)


def _rules_view(row: BufferTable, rules: BufferRules) -> dict[str, Any]:
    return {"table": row.identifier, "max_age_seconds": rules.max_age_seconds, "min_bytes": rules.min_bytes,
            "max_bytes": rules.max_bytes, "max_files": rules.max_files, "combinable": rules.combinable,
            "callback_url": _redacted(row.callback_url),
            "overrides": [n for n in ("max_age_seconds", "min_bytes", "max_bytes", "max_files")
                          if getattr(row, n) is not None]}


def _redacted(url: str | None) -> str | None:
    return redact(url) if url else None


def buffer_status(settings: Settings, identifier: str | None = None) -> list[dict[str, Any]]:
    """Per buffered table: files and bytes waiting, oldest age, batches in flight, which rule fires next."""
    if identifier is not None:
        parse_identifier(identifier)
    with session_scope(settings) as session:
        stmt = select(BufferTable).where(BufferTable.catalog == settings.catalog).order_by(BufferTable.identifier)
        if identifier is not None:
            stmt = stmt.where(BufferTable.identifier == identifier)
        rows = list(session.scalars(stmt))
        if identifier is not None and not rows:
            load_table(settings, identifier)  # a missing table says so
        out = []
        for row in rows:
            rules = rules_of(settings, row)
            level = buffer_level(session, row.id)
            decision = evaluate(rules, level)
            counts = dict(session.execute(
                select(BufferFile.state, func.count()).where(BufferFile.buffer_table_id == row.id)
                .group_by(BufferFile.state)).all())
            in_flight = session.scalar(select(func.count()).select_from(BufferBatch).where(
                BufferBatch.buffer_table_id == row.id, BufferBatch.state.in_(("claimed", "written", "committed"))))
            last = session.scalars(select(BufferBatch).where(
                BufferBatch.buffer_table_id == row.id, BufferBatch.committed_at.is_not(None))
                .order_by(BufferBatch.committed_at.desc()).limit(1)).one_or_none()
            out.append({
                "table": row.identifier,
                "buffered_files": level.files,
                "buffered_bytes": level.bytes,
                "oldest_age_seconds": None if level.oldest_age_seconds is None else round(level.oldest_age_seconds, 1),
                "in_batches": int(counts.get(FileState.CLAIMED.value, 0)),
                "quarantined": int(counts.get(FileState.QUARANTINED.value, 0)),
                "batches_in_flight": int(in_flight or 0),
                "fires_now": decision.rule,
                "next_rule": decision.next_rule,
                "seconds_to_max_age": None if decision.seconds_to_next is None else round(decision.seconds_to_next, 1),
                "last_commit": None if last is None else {
                    "batch": last.id, "snapshot_id": last.committed_snapshot_id, "files": last.files,
                    "at": last.committed_at.isoformat() if last.committed_at else None},
                "rules": _rules_view(row, rules),
            })
        return out
