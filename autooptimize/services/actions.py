"""Submitting actions and reading their outcome. Submission validates everything before writing
anything; executing one (``execute``, services/execution.py) is idempotent under retry and crash, and
one attempt at a time holds the action's lease (services/attempt.py)."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.domain.partitions import PartitionRef
from autooptimize.errors import ActionNotFound, WaitTimeout
from autooptimize.services.execution import execute, fail_permanently
from autooptimize.services.ports import ActionTicket, Dispatch
from autooptimize.services.records import OUTCOME_FIELDS, action_request, outcome_of, record_outcome
from autooptimize.services.submission import check_submission, resolve_partition
from autooptimize.services.tracking import ensure_tracked
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import active_action, audit, get_action, queued_actions, tracked_table

__all__ = ["OUTCOME_FIELDS", "action_request", "default_priority", "execute", "fail_permanently", "get_outcome",
           "outcome_of", "queued_behind", "record_outcome", "resolve_partition", "submit", "wait"]

log = logging.getLogger(__name__)


def submit(
    settings: Settings,
    identifier: str,
    *,
    partition: str | PartitionRef | None = None,
    kind: str = "merge",
    priority: str | None = None,
    trigger: Trigger = Trigger.AD_HOC,
    target_file_size: Any = None,
    dispatch: Dispatch | None = None,
    options: dict[str, Any] | None = None,
    prompted_at: datetime | None = None,
) -> str:
    """Record an action and hand it to ``dispatch`` for the actors; returns its id. ``prompted_at``: for an
    action decide chose, its partition's last writer commit then (``Action.prompted_at``).

    Everything is validated (table, partition, kind, priority, sizes, the broker reachable) before anything
    is written; an untracked table is then tracked with the default tuning. A queued or running action on
    the same partition and kind is returned instead of a duplicate. Without ``dispatch`` (None, or False
    as older callers pass) the action is only recorded, for the caller to execute. A dry run is not an
    action: see :func:`autooptimize.services.preview.preview`.
    """
    dispatch = dispatch or None
    checked = check_submission(settings, identifier, partition=partition, kind=kind, priority=priority,
                               target_file_size=target_file_size, options=options)
    spec_id, key = checked.spec_id, checked.partition_key
    if dispatch is not None:
        dispatch.check()
    table_id = ensure_tracked(settings, identifier)
    with session_scope(settings) as session:
        tracked = session.get(TrackedTable, table_id)
        assert tracked is not None
        hold_submission_lock(session, table_id, spec_id, key, kind)
        existing = active_action(session, table_id, spec_id, key, kind)
        if existing is not None:
            audit(session, "action.deduplicated", action_id=existing.id, table_id=table_id, trigger=trigger.value)
            return existing.id
        action = Action(
            id=str(uuid.uuid4()),
            table_id=table_id,
            spec_id=spec_id,
            partition_key=key,
            partition_values=checked.partition_values,
            kind=kind,
            trigger=trigger.value,
            priority_class=priority or default_priority(settings, tracked.priority_class, trigger),
            state=ActionState.QUEUED.value,
            options={**checked.options, "target_file_size": checked.target_file_size, "dry_run": False},
            attempts=0,
            timings={},
            prompted_at=prompted_at,
        )
        session.add(action)
        session.flush()
        audit(session, "action.submitted", action_id=action.id, table_id=table_id, table=identifier,
              partition=key, kind=kind, trigger=trigger.value, priority=action.priority_class, dry_run=False)
        action_id, priority_class = action.id, action.priority_class
    if dispatch is not None:
        dispatch.action(ActionTicket(action_id, identifier, key, kind, priority_class))
    return action_id


def hold_submission_lock(session: Any, table_id: int, spec_id: int | None, partition_key: str | None,
                         kind: str) -> None:
    """Take, until the transaction ends, PostgreSQL's advisory lock for one (table, partition, kind), so that
    the look for a queued or running action and the insert of a new one are one step. Without it two
    decide tasks judging the same partition at once both found none and both inserted; the queue kept
    one item per partition and kind, so the second stayed queued with no item until the sweeper found it,
    and every decision in between was folded into it: the partition waited ~25 s while files gathered
    (benchmarks.streaming, 2026-11-27)."""
    session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                    {"k": f"ao.submit:{table_id}:{spec_id}:{partition_key}:{kind}"})


def queued_behind(settings: Settings, identifier: str, partition_key: str | None, kind: str,
                  finished: str) -> list[ActionTicket]:
    """Tickets of the actions still queued on the partition and kind of ``finished`` (an action that has just
    ended), other than it. The queue holds one item per partition and kind, so an action recorded while
    another one's item was held got no item of its own; the actor that ends the held one hands these on.
    Without that they waited for the sweeper (AO_SWEEP_AFTER_SECONDS), and decide folded every decision
    on the partition into them meanwhile."""
    with session_scope(settings) as session:
        tracked = tracked_table(session, settings.catalog, identifier)
        if tracked is None:
            return []
        return [ActionTicket(a.id, identifier, a.partition_key, a.kind, a.priority_class)
                for a in queued_actions(session, tracked.id, partition_key, kind) if a.id != finished]


def default_priority(settings: Settings, table_class: str, trigger: Trigger) -> str:
    """The table's class; an ad-hoc request goes one class higher (someone is waiting for it)."""
    classes = settings.priority_classes
    if table_class not in classes:
        return classes[0]
    rank = classes.index(table_class)
    return classes[max(0, rank - 1)] if trigger == Trigger.AD_HOC else table_class


def get_outcome(settings: Settings, action_id: str) -> dict[str, Any]:
    with session_scope(settings) as session:
        action = get_action(session, action_id)
        if action is None:
            raise ActionNotFound(f"no action with id {action_id!r}")
        tracked = session.get(TrackedTable, action.table_id)
        return outcome_of(action, tracked.identifier if tracked else None)


def wait(settings: Settings, action_id: str, timeout: float | None = None, poll: float = 0.5) -> dict[str, Any]:
    """Poll PostgreSQL until the action is terminal; WaitTimeout (a TimeoutError) after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        outcome = get_outcome(settings, action_id)
        if ActionState(outcome["state"]).terminal:
            return outcome
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout(f"action {action_id} is still {outcome['state']} after {timeout} s")
        time.sleep(poll)
