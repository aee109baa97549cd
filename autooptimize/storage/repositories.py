"""Repositories: take a Session, never commit (the caller's ``session_scope`` does)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from autooptimize.storage.models import Action, ActionState, AuditLog, TrackedTable


def now() -> datetime:
    return datetime.now(UTC)


def audit(
    session: Session,
    event: str,
    *,
    action_id: str | None = None,
    table_id: int | None = None,
    **detail: Any,
) -> None:
    """Append one audit record (the log is append-only)."""
    session.add(AuditLog(event=event, action_id=action_id, table_id=table_id, detail=_jsonable(detail)))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def tracked_table(session: Session, catalog: str, identifier: str) -> TrackedTable | None:
    return session.scalars(
        select(TrackedTable).where(TrackedTable.catalog == catalog, TrackedTable.identifier == identifier)
    ).one_or_none()


def tracked_tables(session: Session, catalog: str) -> list[TrackedTable]:
    return list(
        session.scalars(select(TrackedTable).where(TrackedTable.catalog == catalog).order_by(TrackedTable.identifier))
    )


def get_action(session: Session, action_id: str, *, for_update: bool = False) -> Action | None:
    stmt = select(Action).where(Action.id == action_id)
    if for_update:
        stmt = stmt.with_for_update()
    return session.scalars(stmt).one_or_none()


def recent_actions(session: Session, table_id: int, limit: int = 20) -> list[Action]:
    return list(
        session.scalars(
            select(Action).where(Action.table_id == table_id).order_by(Action.created_at.desc()).limit(limit)
        )
    )


def audit_events(session: Session, action_id: str) -> list[AuditLog]:
    return list(session.scalars(select(AuditLog).where(AuditLog.action_id == action_id).order_by(AuditLog.id)))


def _on_partition(partition_key: str | None) -> ColumnElement[bool]:
    """An action on this partition key (None: one on the whole table)."""
    return Action.partition_key.is_(None) if partition_key is None else Action.partition_key == partition_key


def active_action(session: Session, table_id: int, spec_id: int | None, partition_key: str | None,
                  kind: str) -> Action | None:
    """A queued or running action on the same partition and kind, if any."""
    return session.scalars(
        select(Action).where(
            Action.table_id == table_id,
            Action.kind == kind,
            Action.spec_id.is_(None) if spec_id is None else Action.spec_id == spec_id,
            _on_partition(partition_key),
            Action.state.in_([ActionState.QUEUED.value, ActionState.RUNNING.value]),
        )
    ).first()


def queued_actions(session: Session, table_id: int, partition_key: str | None, kind: str) -> list[Action]:
    """The table's queued actions on one partition (None: the whole table) and kind, oldest first."""
    return list(session.scalars(select(Action).where(
        Action.table_id == table_id, Action.kind == kind, Action.state == ActionState.QUEUED.value,
        _on_partition(partition_key)).order_by(Action.created_at)))


def decision_failures(session: Session, table_id: int) -> dict[str, Any]:
    """How many ``decision.failed`` records the table has, and the newest one's reason and time."""
    count = session.execute(select(func.count()).select_from(AuditLog).where(
        AuditLog.table_id == table_id, AuditLog.event == "decision.failed")).scalar_one()
    last = session.scalars(select(AuditLog).where(AuditLog.table_id == table_id, AuditLog.event == "decision.failed")
                           .order_by(AuditLog.id.desc()).limit(1)).one_or_none()
    return {"count": int(count), "last_reason": last.detail.get("reason") if last else None,
            "last_partition": last.detail.get("partition") if last else None,
            "last_at": last.at.isoformat() if last else None}
