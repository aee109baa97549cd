"""Submitting actions and reading their outcome. Submission validates everything before writing
anything; executing one (``execute``, services/execution.py) is idempotent under retry and crash, and
one attempt at a time holds the action's lease (services/attempt.py)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

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
from autooptimize.storage.repositories import active_action, audit, get_action

__all__ = ["OUTCOME_FIELDS", "action_request", "default_priority", "execute", "fail_permanently", "get_outcome",
           "outcome_of", "record_outcome", "resolve_partition", "submit", "wait"]

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
) -> str:
    """Record an action and hand it to ``dispatch`` for the actors; returns its id.

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
        )
        session.add(action)
        session.flush()
        audit(session, "action.submitted", action_id=action.id, table_id=table_id, table=identifier,
              partition=key, kind=kind, trigger=trigger.value, priority=action.priority_class, dry_run=False)
        action_id, priority_class = action.id, action.priority_class
    if dispatch is not None:
        dispatch.action(ActionTicket(action_id, identifier, key, kind, priority_class))
    return action_id


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
