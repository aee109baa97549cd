"""The audit record of a path autooptimize refused to touch (see autooptimize.iceberg.paths)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autooptimize.config import Settings
from autooptimize.iceberg.paths import PathRefused
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action
from autooptimize.storage.repositories import audit


def record_refusals(settings: Settings, refusals: Iterable[PathRefused], *, action_id: str | None = None,
                    **context: Any) -> int:
    """One ``path.refused`` audit record per refusal (path, root, reason, operation, and ``context``),
    tied to the action (and its table) when given; returns how many were recorded."""
    refusals = list(refusals)
    if not refusals:
        return 0
    with session_scope(settings) as session:
        action = session.get(Action, action_id) if action_id else None
        for refused in refusals:
            audit(session, "path.refused", action_id=action_id, table_id=action.table_id if action else None,
                  **refused.audit_detail(), **context)
    return len(refusals)
