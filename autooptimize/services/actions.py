"""Submitting and executing actions. Submission validates everything before writing anything; the
executor is idempotent under retry and crash (see services/rewrite/lifecycle.py)."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.actions import Hooks, MergeOutcome, MergeRequest
from autooptimize.domain.partitions import PartitionRef, format_human
from autooptimize.errors import (
    ActionNotFound,
    ActionRefused,
    AutoOptimizeError,
    ConflictAbort,
    Retry,
    ServiceUnavailable,
    VerificationFailed,
    WaitTimeout,
)
from autooptimize.iceberg.paths import PathRefused
from autooptimize.services.kinds import KINDS, kind_of
from autooptimize.services.ports import ActionTicket, Dispatch
from autooptimize.services.refusals import record_refusals
from autooptimize.services.rewrite.lifecycle import abandon, committed_outcome, committed_parts
from autooptimize.services.sizing import learned
from autooptimize.services.submission import check_submission
from autooptimize.services.tracking import ensure_tracked
from autooptimize.storage.db import session_scope
from autooptimize.storage.locks import AdvisoryLock
from autooptimize.storage.models import Action, ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import active_action, audit, get_action, now

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
        "created_at": action.created_at.isoformat() if action.created_at else None,
        "finished_at": action.finished_at.isoformat() if action.finished_at else None,
        "seconds": (action.finished_at - action.started_at).total_seconds()
        if action.finished_at and action.started_at else None,
    }


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


@contextmanager
def action_lock(settings: Settings, action_id: str) -> Iterator[bool]:
    """The action's advisory lock for the whole execution (autooptimize.storage.locks): if the worker dies
    its connection closes and the lock goes, so a redelivered task can run."""
    with AdvisoryLock(settings, action_id) as lock:
        yield lock.held


def execute(settings: Settings, action_id: str, *, spark: Any = "session", hooks: Hooks | None = None) -> dict[str, Any]:
    """Run an action to a terminal state (or raise Retry); safe to call again with the same id."""
    with action_lock(settings, action_id) as locked:
        if not locked:
            raise Retry(f"action {action_id} is being executed by another worker", delay=30)
        with session_scope(settings) as session:
            action = get_action(session, action_id)
            if action is None:
                raise ActionNotFound(f"no action with id {action_id!r}")
            tracked = session.get(TrackedTable, action.table_id)
            assert tracked is not None
            identifier = tracked.identifier
            if ActionState(action.state).terminal:
                return outcome_of(action, identifier)
            action.state = ActionState.RUNNING.value
            action.attempts += 1
            action.started_at = action.started_at or now()
            audit(session, "action.started", action_id=action_id, table_id=action.table_id, attempt=action.attempts)
        request = action_request(settings, action, tracked)
        kind = kind_of(request.kind)
        if kind is None:
            return _finish(settings, action_id, ActionState.REFUSED, reason="unknown_kind",
                           error=f"action kind {request.kind!r} is not known to this worker; known: "
                                 f"{', '.join(KINDS)}")
        started = time.monotonic()
        try:
            if spark == "session" and not request.dry_run and kind.needs_spark:
                from spark_actors.session import get_session

                spark = get_session(settings)

            def save_checkpoint(checkpoint: dict[str, Any]) -> None:
                with session_scope(settings) as s:
                    a = get_action(s, action_id)
                    assert a is not None
                    a.checkpoint = checkpoint
                    if checkpoint.get("groups") or "writer" not in checkpoint:  # not the pre-write record
                        audit(s, "action.checkpointed", action_id=action_id, table_id=a.table_id,
                              outputs=sum(len(g["outputs"]) for g in checkpoint.get("groups", [])))

            outcome = kind.resolve()(settings, request, spark, save_checkpoint, hooks)
        # under partial progress a failure may follow committed parts: exc.outcome then sums them
        except ActionRefused as exc:
            if isinstance(exc, PathRefused):
                record_refusals(settings, [exc], action_id=action_id)
            return _finish(settings, action_id, ActionState.REFUSED, reason=exc.reason, error=str(exc),
                           outcome=getattr(exc, "outcome", None))
        except ConflictAbort as exc:
            return _finish(settings, action_id, ActionState.ABORTED, reason="conflict", error=str(exc),
                           outcome=getattr(exc, "outcome", None))
        except VerificationFailed as exc:
            return _finish(settings, action_id, ActionState.FAILED, reason="verification_failed", error=str(exc),
                           outcome=getattr(exc, "outcome", None))
        except (ServiceUnavailable, Retry) as exc:
            _requeue(settings, action_id, str(exc))
            raise Retry(str(exc)) from None
        except AutoOptimizeError as exc:
            return _give_up(settings, request, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            if _is_transient(exc):
                _requeue(settings, action_id, f"{type(exc).__name__}: {exc}")
                raise Retry(f"transient failure: {type(exc).__name__}") from None
            log.exception("action %s failed", action_id)
            return _give_up(settings, request, f"{type(exc).__name__}: {exc}")
        outcome.timings["wall"] = time.monotonic() - started
        return _finish(settings, action_id, ActionState(outcome.state), reason=outcome.reason, outcome=outcome)


def action_request(settings: Settings, action: Action, tracked: TrackedTable) -> MergeRequest:
    """What the kind's runner is handed for ``action`` of ``tracked`` (stored rows, or unsaved ones for a
    preview); a partition's rewrite also gets the output sizing the table's rewrites measured."""
    options = dict(action.options or {})
    target = options.get("target_file_size") or tracked.target_file_size
    request = MergeRequest(
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
        options=options,
        max_group_bytes=settings.max_group_bytes,
        concurrency=settings.rewrite_concurrency,
        # someone asked for this one: merge what needs it now; automatic merges follow the policy
        policy=str(options.get("policy") or ("binpack" if action.trigger == Trigger.AD_HOC.value
                                             else settings.merge_policy)),
        settle_seconds=settings.settle_seconds,
        fan_in=settings.merge_fan_in,
    )
    if KINDS.get(request.kind) is not None and KINDS[request.kind].scope == "partition":
        request = dataclasses.replace(request, sizing=learned(settings, tracked.identifier))
    return request


def record_outcome(action: Action, outcome: MergeOutcome) -> None:
    """Copy what an outcome measured onto its action."""
    for name in ("base_snapshot_id", "files_in", "files_out", "bytes_in", "bytes_out", "rows_in",
                 "rows_out", "checksum_in", "checksum_out", "mse_before", "mse_after", "plan"):
        setattr(action, name, getattr(outcome, name))
    action.committed_snapshot_id = outcome.committed_snapshot_id
    action.timings = {k: round(v, 3) for k, v in outcome.timings.items()}
    if outcome.checkpoint is not None:
        action.checkpoint = outcome.checkpoint


def _is_transient(exc: BaseException) -> bool:
    """Lost connections to Spark Connect, PostgreSQL or the catalog: try again later."""
    name = type(exc).__name__
    text_ = str(exc)
    return (
        name in ("SparkConnectGrpcException", "OperationalError", "ConnectionError", "RetriesExceeded")
        or "UNAVAILABLE" in text_
        or "Connection refused" in text_
    )


def _requeue(settings: Settings, action_id: str, error: str) -> None:
    with session_scope(settings) as session:
        action = get_action(session, action_id)
        if action is not None and not ActionState(action.state).terminal:
            action.state = ActionState.QUEUED.value
            action.error = error
            audit(session, "action.retry", action_id=action_id, table_id=action.table_id, error=error)


def fail_permanently(settings: Settings, action_id: str, error: str) -> dict[str, Any]:
    """Give up on an action after its retries (the task layer calls this); cleans its output."""
    with session_scope(settings) as session:
        action = get_action(session, action_id)
        if action is None:
            raise ActionNotFound(f"no action with id {action_id!r}")
        if ActionState(action.state).terminal:
            return outcome_of(action)
        tracked = session.get(TrackedTable, action.table_id)
        assert tracked is not None
        request = MergeRequest(
            action_id=action_id, identifier=tracked.identifier, spec_id=action.spec_id,
            partition_key=action.partition_key, target_file_size=tracked.target_file_size,
            tolerance=tracked.tolerance, min_input_files=tracked.min_input_files, max_bytes=None,
            checkpoint=action.checkpoint, kind=action.kind, options=dict(action.options or {}),
        )
    return _give_up(settings, request, error, reason="retries_exhausted")


def _give_up(settings: Settings, request: MergeRequest, error: str, reason: str = "error") -> dict[str, Any]:
    """Mark an action failed after removing its uncommitted output, unless it was in fact committed."""
    try:
        committed = abandon(settings, request)
    except Exception as exc:  # cleanup is best effort; the error is recorded, orphan removal finds the rest
        log.warning("could not clean up after action %s: %s", request.action_id, exc)
        committed = None
    if committed is not None:
        outcome = committed_outcome(request, committed)
        return _finish(settings, request.action_id, ActionState.SUCCEEDED, reason="already_committed",
                       outcome=outcome)
    try:
        partial = committed_parts(settings, request)  # parts committed before the failure stay committed
    except Exception as exc:
        log.warning("could not read the committed parts of action %s: %s", request.action_id, exc)
        partial = None
    return _finish(settings, request.action_id, ActionState.FAILED, reason=reason, error=error, outcome=partial)


def _finish(
    settings: Settings,
    action_id: str,
    state: ActionState,
    *,
    reason: str | None = None,
    error: str | None = None,
    outcome: MergeOutcome | None = None,
) -> dict[str, Any]:
    with session_scope(settings) as session:
        action = get_action(session, action_id, for_update=True)
        assert action is not None
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
        return outcome_of(action, tracked.identifier if tracked else None)


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
