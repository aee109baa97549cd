"""What an attempt writes about its action in PostgreSQL, and the public view of an action.

Every write an attempt makes (its checkpoint, a retry, its end) is made in a transaction that first
confirms the attempt's lease (:meth:`services.attempt.HeldLease.confirm`): a holder that lost its lease
records nothing, whoever holds it now does. Recording the end releases the lease in the same
transaction.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest
from autooptimize.domain.partitions import format_human
from autooptimize.services.attempt import HeldLease
from autooptimize.services.choose import partition_history, policy_tuning
from autooptimize.services.kinds import KINDS
from autooptimize.services.sizing import learned
from autooptimize.storage import leases
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import audit, get_action, now

log = logging.getLogger(__name__)

OUTCOME_FIELDS = (
    "id", "state", "reason", "kind", "trigger", "priority_class", "partition", "files_in", "files_out",
    "rows_in", "rows_out", "bytes_in", "bytes_out", "checksum_in", "checksum_out", "mse_before", "mse_after",
    "base_snapshot_id", "snapshot_id", "attempts", "error",
)


def outcome_of(action: Action, table: str | None = None) -> dict[str, Any]:
    """The public view of an action (what the API and ``optimize --json`` print)."""
    return {
        "id": action.id,
        "table": table,
        "state": action.state,
        "reason": action.reason,
        "kind": action.kind,
        "trigger": action.trigger,
        "priority_class": action.priority_class,
        "partition": format_human(list(action.partition_values.items())) if action.partition_values
        else action.partition_key,
        "partition_key": action.partition_key,
        "files_in": action.files_in,
        "files_out": action.files_out,
        "rows_in": action.rows_in,
        "rows_out": action.rows_out,
        "bytes_in": action.bytes_in,
        "bytes_out": action.bytes_out,
        "checksum_in": action.checksum_in,
        "checksum_out": action.checksum_out,
        "mse_before": action.mse_before,
        "mse_after": action.mse_after,
        "base_snapshot_id": action.base_snapshot_id,
        "snapshot_id": action.committed_snapshot_id,
        "attempts": action.attempts,
        "error": action.error,
        "plan": action.plan,
        "timings": dict(action.timings or {}),
        "created_at": action.created_at.isoformat() if action.created_at else None,
        "finished_at": action.finished_at.isoformat() if action.finished_at else None,
        "seconds": (action.finished_at - action.started_at).total_seconds()
        if action.finished_at and action.started_at else None,
    }


def request_of(settings: Settings, action: Action, tracked: TrackedTable) -> ActionRequest:
    """The request the action's kind runs with: the action's options over the table's tuning."""
    options = dict(action.options or {})
    target = options.get("target_file_size") or tracked.target_file_size
    return ActionRequest(
        action_id=action.id,
        identifier=tracked.identifier,
        spec_id=action.spec_id,
        partition_key=action.partition_key,
        target_file_size=target,
        tolerance=min(tracked.tolerance, target),
        min_input_files=tracked.min_input_files,
        max_bytes=tracked.max_bytes_per_action,
        checkpoint=action.checkpoint,
        dry_run=bool(options.get("dry_run")),
        kind=action.kind,
        sort_order=tracked.sort_order,
        zorder_columns=tracked.zorder_columns,
        options=options,
        max_group_bytes=settings.max_group_bytes,
        concurrency=settings.rewrite_concurrency,
        # someone asked for this one: merge what needs it now; automatic merges follow the policy
        policy=str(options.get("policy") or ("binpack" if action.trigger == Trigger.AD_HOC.value
                                             else settings.merge_policy)),
        settle_seconds=settings.settle_seconds,
        **policy_tuning(settings, tracked),
        **partition_history(settings, tracked.id, action.spec_id, action.partition_key, target),
        engine=str(options.get("engine") or settings.rewrite_engine),
    )


def action_request(settings: Settings, action: Action, tracked: TrackedTable) -> ActionRequest:
    """:func:`request_of` with :func:`with_sizing` (what an attempt runs, and what a preview plans with)."""
    return with_sizing(settings, request_of(settings, action, tracked))


def with_sizing(settings: Settings, request: ActionRequest) -> ActionRequest:
    """For a partition's rewrite, ``request`` with the output sizing the table's rewrites measured."""
    if KINDS.get(request.kind) is not None and KINDS[request.kind].scope == "partition":
        request = dataclasses.replace(request, sizing=learned(settings, request.identifier))
    return request


def record_outcome(action: Action, outcome: ActionOutcome) -> None:
    """Copy what an outcome measured onto its action."""
    for name in ("base_snapshot_id", "files_in", "files_out", "bytes_in", "bytes_out", "rows_in",
                 "rows_out", "checksum_in", "checksum_out", "mse_before", "mse_after", "plan"):
        setattr(action, name, getattr(outcome, name))
    action.committed_snapshot_id = outcome.committed_snapshot_id
    action.timings = {k: round(v, 3) for k, v in outcome.timings.items()}
    if outcome.checkpoint is not None:
        action.checkpoint = outcome.checkpoint


def save_checkpoint(settings: Settings, held: HeldLease, checkpoint: dict[str, Any]) -> None:
    """Record the attempt's checkpoint (LeaseLost, nothing written, when the lease is gone)."""
    with session_scope(settings) as session:
        action = get_action(session, held.lease.action_id, for_update=True)
        assert action is not None
        held.confirm(session)
        action.checkpoint = checkpoint
        if checkpoint.get("groups") or "writer" not in checkpoint:  # not the pre-write record
            audit(session, "action.checkpointed", action_id=action.id, table_id=action.table_id,
                  outputs=sum(len(g["outputs"]) for g in checkpoint.get("groups", [])))


def requeue(settings: Settings, held: HeldLease, error: str) -> None:
    """Put the action back to queued with ``error`` and release the lease, for a later delivery."""
    with session_scope(settings) as session:
        action = get_action(session, held.lease.action_id, for_update=True)
        assert action is not None
        held.confirm(session)
        if not ActionState(action.state).terminal:
            action.state = ActionState.QUEUED.value
            action.error = error
            audit(session, "action.retry", action_id=action.id, table_id=action.table_id, error=error,
                  attempt=action.attempts)
        leases.release(session, held.lease)


def finish(settings: Settings, action_id: str, state: ActionState, *, held: HeldLease | None,
           reason: str | None = None, error: str | None = None, outcome: ActionOutcome | None = None
           ) -> dict[str, Any]:
    """Record the action's end (and release the lease) in one transaction conditional on ``held``."""
    with session_scope(settings) as session:
        action = get_action(session, action_id, for_update=True)
        assert action is not None
        if held is not None:
            held.confirm(session)
        tracked = session.get(TrackedTable, action.table_id)
        if outcome is not None:
            record_outcome(action, outcome)
        action.state = state.value
        action.reason = reason
        action.error = error
        action.finished_at = now()
        audit(session, f"action.{state.value}", action_id=action_id, table_id=action.table_id, reason=reason,
              error=error, snapshot_id=action.committed_snapshot_id, files_in=action.files_in,
              files_out=action.files_out, rows_in=action.rows_in, rows_out=action.rows_out)
        if held is not None:
            leases.release(session, held.lease)
        return outcome_of(action, tracked.identifier if tracked else None)


def note(settings: Settings, action_id: str, event: str, **detail: Any) -> None:
    """Append an audit record about the action without touching it (e.g. what a non-holder left alone)."""
    try:
        with session_scope(settings) as session:
            audit(session, event, action_id=action_id, **detail)
    except Exception as exc:  # the database may be what went away; the log line is the record then
        log.warning("action %s: could not record %s %s (%s: %s)", action_id, event, detail, type(exc).__name__, exc)
