"""Tables this version leaves untouched as a whole (an unknown format version, delete file kind or type):
the refusal is audited once per table and cause, not once per snapshot or poll, and explain and status
show it."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.errors import TableRefused
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog
from autooptimize.storage.repositories import audit, tracked_table

log = logging.getLogger(__name__)


def note_refused(settings: Settings, identifier: str, refused: TableRefused) -> dict[str, str]:
    """Record that ``identifier`` is refused for ``refused``'s reason: a ``table.refused`` audit record and
    one ERROR log line, unless the table's latest refusal already says the same; returns what explain and
    status show (``reason``, ``message``)."""
    shown = {"reason": refused.reason, "message": str(refused)}
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        last = session.execute(
            select(AuditLog.detail).where(AuditLog.event == "table.refused",
                                          AuditLog.detail["table"].astext == identifier,
                                          AuditLog.detail["catalog"].astext == settings.catalog)
            .order_by(AuditLog.id.desc()).limit(1)
        ).scalar_one_or_none()
        if last is not None and last.get("reason") == shown["reason"] and last.get("message") == shown["message"]:
            return shown
        audit(session, "table.refused", table_id=row.id if row else None, table=identifier,
              catalog=settings.catalog, **shown)
    log.error("table %s is refused (%s): %s; it is left untouched until that changes", identifier,
              refused.reason, refused)
    return shown


def refused_view(identifier: str, shown: dict[str, Any]) -> dict[str, Any]:
    """What explain and status return for a refused table: no partitions, and why."""
    return {"table": identifier, "snapshot_id": None, "refused": shown, "partitions": []}
