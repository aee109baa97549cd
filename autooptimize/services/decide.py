"""Decide (for now): a partition the listener finds at MSE ≥ T² gets a merge action, through the same
submission path, queue and audit trail as an ad-hoc request (trigger "event")."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.errors import AutoOptimizeError
from autooptimize.services import actions
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, PartitionStats, TrackedTable, Trigger
from autooptimize.storage.repositories import audit, now

log = logging.getLogger(__name__)
_SEPARATORS = (",", "/", "=")


def submit_for_partition(settings: Settings, table_id: int, spec_id: int, partition_key: str,
                         trigger: Trigger = Trigger.EVENT, *, dispatch: bool = True) -> str | None:
    """Submit a merge for one observed partition; returns the action id, or None when not applicable."""
    with session_scope(settings) as session:
        tracked = session.get(TrackedTable, table_id)
        stats = session.scalars(select(PartitionStats).where(
            PartitionStats.table_id == table_id, PartitionStats.spec_id == spec_id,
            PartitionStats.partition_key == partition_key)).one_or_none()
        if tracked is None or not tracked.enabled or "merge" not in tracked.allowed_actions:
            return None
        identifier = tracked.identifier
        values = dict(stats.partition_values) if stats is not None else {}
        last = session.scalars(select(Action).where(
            Action.table_id == table_id, Action.spec_id == spec_id, Action.partition_key == partition_key,
            Action.kind == "merge").order_by(Action.created_at.desc()).limit(1)).one_or_none()
        if (last is not None and last.state in (ActionState.SKIPPED.value, ActionState.REFUSED.value)
                and last.finished_at is not None and stats is not None and stats.updated_at <= last.finished_at):
            # Judged already and the partition has not changed since: asking again would change nothing.
            return None
        if (last is not None and tracked.min_interval_seconds > 0 and last.finished_at is not None
                and last.state == ActionState.SUCCEEDED.value
                and (now() - last.finished_at).total_seconds() < tracked.min_interval_seconds):
            audit(session, "decision.deferred", table_id=table_id, reason="min_interval", partition=partition_key,
                  last_action=last.id, min_interval_seconds=tracked.min_interval_seconds)
            return None
    if partition_key and not values:
        log.warning("%s: no stored values for partition %s; skipping", identifier, partition_key)
        return None
    if any(sep in str(v) for v in values.values() for sep in _SEPARATORS):
        log.warning("%s: partition %s has separator characters in its values; skipping", identifier, partition_key)
        return None
    expression = ",".join(f"{k}={v}" for k, v in values.items()) or None
    return actions.submit(settings, identifier, partition=expression, trigger=trigger, dispatch=dispatch)


def on_attention_handler(settings: Settings) -> Callable[[int, int, str], None]:
    """The listener's ``on_attention``: submit a merge; a partition of an older spec is left alone."""

    def handle(table_id: int, spec_id: int, partition_key: str) -> None:
        try:
            action_id = submit_for_partition(settings, table_id, spec_id, partition_key)
        except AutoOptimizeError as exc:
            log.info("table %s partition %s: not submitted (%s)", table_id, partition_key, exc)
            return
        if action_id:
            log.info("table %s partition %s: merge %s submitted", table_id, partition_key, action_id)

    return handle
