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
from autooptimize.errors import ActionNotFound, InvalidArgument, WaitTimeout
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import parse_partition
from autooptimize.iceberg.partitions import human_values
from autooptimize.services.execution import execute, fail_permanently
from autooptimize.services.kinds import KINDS
from autooptimize.services.ports import ActionTicket, Dispatch
from autooptimize.services.records import OUTCOME_FIELDS, outcome_of
from autooptimize.services.tracking import ACTION_KINDS, ensure_tracked, size_arg
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import active_action, audit, get_action

__all__ = ["OUTCOME_FIELDS", "default_priority", "execute", "fail_permanently", "get_outcome", "outcome_of",
           "resolve_partition", "submit", "wait"]

log = logging.getLogger(__name__)


def submit(
    settings: Settings,
    identifier: str,
    *,
    partition: str | PartitionRef | None = None,
    kind: str = "merge",
    priority: str | None = None,
    trigger: Trigger = Trigger.AD_HOC,
    dry_run: bool = False,
    target_file_size: Any = None,
    dispatch: Dispatch | None = None,
    options: dict[str, Any] | None = None,
) -> str:
    """Record an action and hand it to ``dispatch`` for the actors; returns its id.

    Everything is validated (table, partition, kind, priority, sizes, the broker reachable) before anything
    is written. A queued or running action on the same partition and kind is returned instead of a
    duplicate. A dry run is planned inline, recorded, and never dispatched. Without ``dispatch`` (None, or
    False as older callers pass) the action is only recorded, for the caller to execute.
    """
    dispatch = dispatch or None
    if kind not in ACTION_KINDS:
        raise InvalidArgument(f"action {kind!r} is not supported; valid actions: {', '.join(ACTION_KINDS)}")
    if priority is not None and priority not in settings.priority_classes:
        raise InvalidArgument(f"priority {priority!r} is not one of {', '.join(settings.priority_classes)}")
    target = None if target_file_size is None else size_arg("target_file_size", target_file_size)
    table = load_table(settings, identifier)
    action_kind = KINDS[kind]
    extra = action_kind.validate(table, dict(options or {}))
    spec_id = key = values = None
    if partition is not None and action_kind.scope == "table":
        raise InvalidArgument(f"action {kind!r} works on the whole table; it takes no partition (got {partition!r})")
    if partition is not None:
        ref = resolve_partition(table, partition)
        spec_id, key = ref.spec_id, ref.key
        values = dict(human_values(table.specs()[ref.spec_id], table.schema(), ref))
    if dispatch is not None and not dry_run:
        dispatch.check()
    table_id = ensure_tracked(settings, identifier)
    with session_scope(settings) as session:
        tracked = session.get(TrackedTable, table_id)
        assert tracked is not None
        if not dry_run:
            existing = active_action(session, table_id, spec_id, key, kind)
            if existing is not None:
                audit(session, "action.deduplicated", action_id=existing.id, table_id=table_id, trigger=trigger.value)
                return existing.id
        action = Action(
            id=str(uuid.uuid4()),
            table_id=table_id,
            spec_id=spec_id,
            partition_key=key,
            partition_values=values,
            kind=kind,
            trigger=trigger.value,
            priority_class=priority or default_priority(settings, tracked.priority_class, trigger),
            state=ActionState.QUEUED.value,
            options={**extra, "target_file_size": target, "dry_run": dry_run},
            attempts=0,
            timings={},
        )
        session.add(action)
        session.flush()
        audit(session, "action.submitted", action_id=action.id, table_id=table_id, table=identifier,
              partition=key, kind=kind, trigger=trigger.value, priority=action.priority_class, dry_run=dry_run)
        action_id, priority_class = action.id, action.priority_class
    if dry_run:
        execute(settings, action_id, spark=None)
    elif dispatch is not None:
        dispatch.action(ActionTicket(action_id, identifier, key, kind, priority_class))
    return action_id


def resolve_partition(table: Any, partition: str | PartitionRef) -> PartitionRef:
    """A partition named by a person (``ts_hour=2024-06-01-12``, in the table's current spec) or handed
    over inside the service (a PartitionRef of any of the table's specs); InvalidArgument otherwise."""
    if isinstance(partition, PartitionRef):
        spec = table.specs().get(partition.spec_id)
        if spec is None or len(spec.fields) != len(partition.values) or not spec.fields:
            raise InvalidArgument(f"partition {partition.key!r} does not fit partition spec {partition.spec_id} of "
                                  f"table {'.'.join(table.name())}")
        return partition
    return parse_partition(table, partition)


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
