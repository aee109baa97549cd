"""The hygiene sweep: which hygiene actions each tracked table needs now, submitted on schedule."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.table import Table
from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.durations import format_duration
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.manifests import data_manifests
from autooptimize.services.actions import submit
from autooptimize.services.hygiene.common import audit_action
from autooptimize.services.hygiene.expire import plan_expiry, retention
from autooptimize.services.ports import Dispatch
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, Trigger
from autooptimize.storage.repositories import tracked_tables

log = logging.getLogger(__name__)

HYGIENE_KINDS = ("rewrite_manifests", "expire_snapshots", "remove_orphans")


@dataclass(frozen=True)
class HygieneDecision:
    """One hygiene action the sweep submits for a table, and why."""

    kind: str
    reason: str


def hygiene_decisions(settings: Settings, table: Table, allowed: Iterable[str],
                      last_orphan_run: datetime | None, now: datetime) -> list[HygieneDecision]:
    """What the sweep submits for one table (pure reads of its metadata): rewrite_manifests over the
    threshold, expire_snapshots when a snapshot is past retention, remove_orphans every
    AO_ORPHAN_SWEEP_INTERVAL_SECONDS. Only kinds in the table's ``allowed_actions``."""
    allowed = set(allowed)
    decisions: list[HygieneDecision] = []
    if table.current_snapshot() is None:
        return decisions
    if "rewrite_manifests" in allowed:
        count = len(data_manifests(table))
        if count > settings.manifest_threshold:
            decisions.append(HygieneDecision("rewrite_manifests",
                                             f"{count} data manifests > threshold {settings.manifest_threshold}"))
    if "expire_snapshots" in allowed:
        older_than, retain_last = retention(settings, table, {})
        plan = plan_expiry(table, older_than, retain_last, int(now.timestamp() * 1000))
        if plan.expire:
            decisions.append(HygieneDecision("expire_snapshots", f"{len(plan.expire)} snapshot(s) past retention "
                                             f"{format_duration(older_than)}, keeping {retain_last}"))
    interval = settings.orphan_sweep_interval_seconds
    if "remove_orphans" in allowed and interval > 0:
        if last_orphan_run is None or (now - last_orphan_run).total_seconds() >= interval:
            decisions.append(HygieneDecision("remove_orphans", "never run" if last_orphan_run is None
                                             else f"last run {last_orphan_run.isoformat()}"))
    return decisions


def sweep_hygiene(settings: Settings, *, dispatch: Dispatch | None = None,
                  now: datetime | None = None) -> dict[str, list[str]]:
    """Submit the hygiene actions every enabled tracked table needs (trigger: schedule); returns the kinds
    submitted per table. Idempotent: a queued or running action of the same kind is not duplicated."""
    now = now or datetime.now(UTC)
    with session_scope(settings) as session:
        rows = [(t.id, t.identifier, tuple(t.allowed_actions or ())) for t in tracked_tables(session, settings.catalog)
                if t.enabled]
        last_runs = dict(session.execute(
            select(Action.table_id, Action.created_at).where(Action.kind == "remove_orphans")
            .order_by(Action.table_id, Action.created_at.desc()).distinct(Action.table_id)
        ).tuples().all())
    submitted: dict[str, list[str]] = {}
    for table_id, identifier, allowed in rows:
        if not set(allowed) & set(HYGIENE_KINDS):
            continue
        try:
            table = load_table(settings, identifier)
            decisions = hygiene_decisions(settings, table, allowed, last_runs.get(table_id), now)
        except Exception:  # one broken table must not stop the sweep; the next one tries again
            log.exception("hygiene sweep: cannot decide for %s", identifier)
            continue
        for decision in decisions:
            try:
                action_id = submit(settings, identifier, kind=decision.kind, trigger=Trigger.SCHEDULE,
                                   dispatch=dispatch)
            except Exception:
                log.exception("hygiene sweep: submitting %s for %s failed", decision.kind, identifier)
                continue
            audit_action(settings, action_id, "hygiene.decided", kind=decision.kind, reason=decision.reason)
            submitted.setdefault(identifier, []).append(decision.kind)
    return submitted
