"""Executing an action: one attempt per delivery, each under the action's lease (services/attempt.py).

An attempt first takes the lease (:func:`claim`). A delivery that finds a live holder does nothing and
raises ActionBusy: the holder's work is never touched. The attempt that takes the lease counts itself
(``attempts``); once AO_MAX_ATTEMPTS attempts have run, the next one fails the action with its last
error instead of running (a task that kills its worker ends). An attempt that lost its lease stops and
records nothing (LeaseLost); one past AO_ACTION_TIMEOUT_SECONDS is stopped, removes its uncommitted
output and is retried (AttemptTimedOut). Exactly-once across attempts is the lifecycle's
(services/rewrite/lifecycle.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionRequest, Engine, Hooks
from autooptimize.domain.cancel import cancellable
from autooptimize.domain.profile import Profile, phase, profiling
from autooptimize.errors import (
    ActionBusy,
    ActionNotFound,
    ActionRefused,
    AttemptTimedOut,
    AutoOptimizeError,
    CommitOutcomeUnknown,
    ConflictAbort,
    LeaseLost,
    Retry,
    ServiceUnavailable,
    VerificationFailed,
)
from autooptimize.failures import failure_text, is_transient
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.commit import find_action_snapshot
from autooptimize.iceberg.paths import PathRefused
from autooptimize.services.attempt import HeldLease
from autooptimize.services.kinds import KINDS, kind_of
from autooptimize.services.records import (
    finish,
    note,
    outcome_of,
    request_of,
    requeue,
    save_checkpoint,
    with_sizing,
)
from autooptimize.services.refusals import record_refusals
from autooptimize.services.rewrite.lifecycle import abandon, committed_outcome, committed_parts, spark_tag
from autooptimize.storage import leases
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import ActionState, TrackedTable, Trigger
from autooptimize.storage.repositories import audit, get_action, now
from spark_actors.session import get_session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """An action whose lease this process has just taken."""

    lease: leases.LeaseGrant
    request: ActionRequest
    state: str  # the action's state when the lease was taken
    attempts: int  # attempts counted, this one included when it was started
    started: bool  # False: the lease was taken to give up or re-queue, not to run
    error: str | None  # the last error recorded
    priority_class: str
    automatic: bool = False  # decided by the service (event or schedule), not asked for
    allowed: tuple[str, ...] = ()  # the table's allowed action kinds when the lease was taken


def claim(settings: Settings, action_id: str, role: str, *, start: bool) -> Claim | dict[str, Any]:
    """Take the action's lease; the outcome (a dict) instead when the action is already terminal.

    Raises ActionBusy when a live attempt holds it, ActionNotFound, and Retry when PostgreSQL cannot be
    reached. With ``start`` the attempt is counted and the action marked running, unless
    AO_MAX_ATTEMPTS attempts have run already (``started`` is False then). An earlier attempt that
    ended without a word (its worker died, or it lost its lease) becomes the action's last error.
    """
    try:
        with session_scope(settings) as session:
            action = get_action(session, action_id, for_update=True)
            if action is None:
                raise ActionNotFound(f"no action with id {action_id!r}")
            tracked = session.get(TrackedTable, action.table_id)
            assert tracked is not None
            if ActionState(action.state).terminal:
                return outcome_of(action, tracked.identifier)
            taken = leases.acquire(session, action_id, leases.holder_identity(role), settings.action_lease_seconds)
            if isinstance(taken, leases.Busy):
                busy = taken
            else:
                busy = None
                if not taken.previous_released:
                    action.error = (f"attempt {action.attempts} ended without an outcome: its worker died or "
                                    f"lost its lease (holder {taken.previous_holder})")
                    audit(session, "action.attempt_lost", action_id=action_id, table_id=action.table_id,
                          attempt=action.attempts, holder=taken.previous_holder)
                state = action.state
                started = start and action.attempts < settings.max_attempts
                if started:
                    action.state = ActionState.RUNNING.value
                    action.attempts += 1
                    action.started_at = action.started_at or now()
                    audit(session, "action.started", action_id=action_id, table_id=action.table_id,
                          attempt=action.attempts, token=taken.lease.token)
                result = Claim(taken.lease, request_of(settings, action, tracked), state, action.attempts, started,
                               action.error, action.priority_class, automatic=action.trigger != Trigger.AD_HOC.value,
                               allowed=tuple(tracked.allowed_actions or ()))
    except AutoOptimizeError:
        raise
    except Exception as exc:
        if is_transient(exc):
            raise Retry(f"cannot take the lease of action {action_id}: {type(exc).__name__}", delay=10) from None
        raise
    if busy is not None:
        note(settings, action_id, "action.duplicate_left_alone", role=role, holder=busy.holder,
             remaining=round(busy.remaining, 1))
        raise ActionBusy(f"action {action_id} is being executed by another worker ({busy.holder}); left alone",
                         delay=busy.remaining + 1, holder=busy.holder)
    return result


def execute(settings: Settings, action_id: str, *, spark: Any = "session", hooks: Hooks | None = None) -> dict[str, Any]:
    """Run one attempt of the action to a terminal state, or raise Retry (ActionBusy: another attempt is
    alive; LeaseLost; AttemptTimedOut; a transient failure). Safe to call again with the same id."""
    claimed = claim(settings, action_id, "attempt", start=True)
    if isinstance(claimed, dict):
        return claimed
    with HeldLease(settings, claimed.lease, timeout=settings.action_timeout_seconds) as held:
        if not claimed.started:
            error = claimed.error or f"no outcome after {claimed.attempts} attempts"
            return give_up(settings, claimed.request, held, error, reason="attempts_exhausted")
        return _run(settings, claimed, held, spark, hooks or Hooks())


def _run(settings: Settings, claimed: Claim, held: HeldLease, spark: Any, hooks: Hooks) -> dict[str, Any]:
    request = claimed.request
    kind = kind_of(request.kind)
    if kind is None:
        return finish(settings, request.action_id, ActionState.REFUSED, held=held, reason="unknown_kind",
                      error=f"action kind {request.kind!r} is not known to this worker; known: {', '.join(KINDS)}")
    if claimed.automatic and request.kind not in claimed.allowed:
        # allowed_actions changed since it was decided (or re-queued): the table's owner said no
        return finish(settings, request.action_id, ActionState.REFUSED, held=held, reason="not_allowed",
                      error=f"action kind {request.kind!r} is no longer among the table's allowed actions "
                            f"({', '.join(claimed.allowed)}); nothing was done")
    started = time.monotonic()
    cpu_started = time.process_time()  # the worker's core-seconds (threads included): the budget's measure
    profile = Profile()
    stop = threading.Event()  # pyarrow-path groups in this process ask it between batches (domain/cancel.py)
    try:
        with profiling() as profile:
            with phase("sizing"):
                request = with_sizing(settings, request)
            if spark == "session" and not request.dry_run and kind.needs_spark:
                if request.engine == Engine.LOCAL.value:
                    spark = None  # the single-machine engine: pyarrow in this process, no Spark session
                else:
                    with phase("session"):
                        spark = get_session(settings)
            tag = spark_tag(request.action_id)
            held.on_stop(_interrupter(spark, tag))
            held.on_stop(stop.set)
            # this thread's Spark work too (planning, calibration), not only group jobs
            with _tagged(spark, tag), cancellable(stop):
                outcome = kind.resolve()(settings, request, spark, lambda c: save_checkpoint(settings, held, c),
                                         hooks)
    except Exception as exc:
        return _failed(settings, dataclasses.replace(claimed, request=request), held, exc)
    outcome.timings.update(profile.seconds)  # the phases inside (domain/profile.py)
    outcome.timings["wall"] = time.monotonic() - started
    outcome.timings["cpu"] = time.process_time() - cpu_started
    return finish(settings, request.action_id, ActionState(outcome.state), held=held, reason=outcome.reason,
                  outcome=outcome)


def _failed(settings: Settings, claimed: Claim, held: HeldLease, exc: Exception) -> dict[str, Any]:
    """Map what stopped the attempt to the action's next state (or re-raise for the task to retry)."""
    action_id = claimed.request.action_id
    # before deciding anything (cleaning up, recording): is the action still ours?
    if isinstance(exc, LeaseLost) or not held.holds():
        log.warning("action %s: lost its lease; left to its new holder (%s)", action_id, exc)
        note(settings, action_id, "action.lease_lost", token=held.lease.token, error=f"{type(exc).__name__}: {exc}")
        raise LeaseLost(f"action {action_id} lost its lease during attempt {claimed.attempts}",
                        delay=held.lease.seconds) from None
    if isinstance(exc, AttemptTimedOut) or held.stopped == "timed_out":
        return _timed_out(settings, claimed, held)
    if isinstance(exc, CommitOutcomeUnknown):
        return _unsettled(settings, claimed, held, exc)
    # under partial progress a failure may follow committed parts: exc.outcome then sums them
    partial = getattr(exc, "outcome", None)
    if isinstance(exc, ActionRefused):
        if isinstance(exc, PathRefused):  # a path outside the table: recorded with its path and reason
            record_refusals(settings, [exc], action_id=action_id)
        return finish(settings, action_id, ActionState.REFUSED, held=held, reason=exc.reason, error=str(exc),
                      outcome=partial)
    if isinstance(exc, ConflictAbort):
        return finish(settings, action_id, ActionState.ABORTED, held=held, reason="conflict", error=str(exc),
                      outcome=partial)
    if isinstance(exc, VerificationFailed):
        return finish(settings, action_id, ActionState.FAILED, held=held, reason="verification_failed",
                      error=str(exc), outcome=partial)
    if isinstance(exc, ServiceUnavailable | Retry):
        return _again(settings, claimed, held, str(exc), getattr(exc, "delay", 5.0))
    if is_transient(exc):
        return _again(settings, claimed, held, failure_text(exc), 5.0)
    if not isinstance(exc, AutoOptimizeError):
        log.error("action %s failed", action_id, exc_info=(type(exc), exc, exc.__traceback__))
    return give_up(settings, claimed.request, held, f"{type(exc).__name__}: {exc}")


def _again(settings: Settings, claimed: Claim, held: HeldLease, error: str, delay: float) -> dict[str, Any]:
    """Queue the action for another attempt (raises Retry), or fail it when this was the last one allowed."""
    if claimed.attempts >= settings.max_attempts:
        return give_up(settings, claimed.request, held, error, reason="attempts_exhausted")
    requeue(settings, held, error)
    raise Retry(error, delay=delay)


def _unsettled(settings: Settings, claimed: Claim, held: HeldLease, exc: CommitOutcomeUnknown) -> dict[str, Any]:
    """A commit's answer was lost: success if the table's history has the action now; otherwise another
    attempt settles it (its output kept). Past AO_MAX_ATTEMPTS the action fails with its output kept:
    when in doubt, nothing is removed (orphan removal reclaims it once it is old and unreferenced)."""
    request = claimed.request
    error = f"commit outcome unknown: {exc}"
    note(settings, request.action_id, "action.commit_outcome_unknown", attempt=claimed.attempts,
         snapshot_id=exc.snapshot_id, parent_id=exc.parent_id, error=failure_text(exc.__cause__ or exc))
    try:
        table = load_table(settings, request.identifier)
        committed = find_action_snapshot(table, request.action_id)
    except Exception as look:  # the catalog is still away: the next attempt looks again
        log.warning("action %s: cannot look for its commit yet: %s", request.action_id, failure_text(look))
        committed = None
    if committed is not None:
        return finish(settings, request.action_id, ActionState.SUCCEEDED, held=held, reason="already_committed",
                      outcome=committed_outcome(_latest(settings, request), committed.snapshot_id))
    if claimed.attempts >= settings.max_attempts:
        return finish(settings, request.action_id, ActionState.FAILED, held=held, reason="commit_outcome_unknown",
                      error=error + "; its output is kept")
    requeue(settings, held, error)
    raise Retry(error, delay=10.0)


def _latest(settings: Settings, request: ActionRequest) -> ActionRequest:
    """``request`` with the checkpoint recorded since it was read (this attempt's)."""
    with session_scope(settings) as session:
        action = get_action(session, request.action_id)
        checkpoint = action.checkpoint if action is not None else request.checkpoint
    return dataclasses.replace(request, checkpoint=checkpoint)


def _timed_out(settings: Settings, claimed: Claim, held: HeldLease) -> dict[str, Any]:
    """The attempt ran past its timeout and was stopped: remove its uncommitted output, then retry."""
    request = claimed.request
    error = f"attempt {claimed.attempts} ran past AO_ACTION_TIMEOUT_SECONDS ({settings.action_timeout_seconds} s)"
    log.warning("action %s: %s; cleaning up", request.action_id, error)
    note(settings, request.action_id, "action.timed_out", attempt=claimed.attempts,
         timeout=settings.action_timeout_seconds)
    committed = _abandon(settings, request)
    if committed is not None:  # the commit landed before the attempt stopped: record it
        return finish(settings, request.action_id, ActionState.SUCCEEDED, held=held, reason="already_committed",
                      outcome=committed_outcome(request, committed))
    return _again(settings, claimed, held, error, 5.0)


def give_up(settings: Settings, request: ActionRequest, held: HeldLease, error: str, reason: str = "error"
            ) -> dict[str, Any]:
    """As the lease holder: mark the action failed after removing its uncommitted output, unless it was
    in fact committed (then it succeeded)."""
    committed = _abandon(settings, request)
    if committed is not None:
        return finish(settings, request.action_id, ActionState.SUCCEEDED, held=held, reason="already_committed",
                      outcome=committed_outcome(request, committed))
    try:
        partial = committed_parts(settings, request)  # parts committed before the failure stay committed
    except Exception as exc:
        log.warning("could not read the committed parts of action %s: %s", request.action_id, exc)
        partial = None
    return finish(settings, request.action_id, ActionState.FAILED, held=held, reason=reason, error=error,
                  outcome=partial)


def _abandon(settings: Settings, request: ActionRequest) -> int | None:
    """The committed snapshot id, or None after removing what can be removed; LeaseLost goes through
    (a holder that lost its lease deletes nothing more)."""
    try:
        return abandon(settings, _latest(settings, request))
    except LeaseLost:
        raise
    except CommitOutcomeUnknown as exc:  # a commit may still land: its output stays
        log.warning("action %s: %s", request.action_id, exc)
        return None
    except Exception as exc:  # cleanup is best effort; the error is recorded, orphan removal finds the rest
        log.warning("could not clean up after action %s: %s", request.action_id, exc)
        return None


def fail_permanently(settings: Settings, action_id: str, error: str) -> dict[str, Any]:
    """Give up on an action (cleaning its output) as the holder of its lease; ActionBusy while a live
    attempt holds it (its work is never touched)."""
    claimed = claim(settings, action_id, "give-up", start=False)
    if isinstance(claimed, dict):
        return claimed
    with HeldLease(settings, claimed.lease) as held:
        return give_up(settings, claimed.request, held, error, reason="retries_exhausted")


@contextmanager
def _tagged(spark: Any, tag: str) -> Iterator[None]:
    """Spark operations this thread starts inside the block carry ``tag`` (Spark Connect tags are per thread)."""
    if spark is None or not hasattr(spark, "addTag"):
        yield
        return
    spark.addTag(tag)
    try:
        yield
    finally:
        spark.removeTag(tag)


def _interrupter(spark: Any, tag: str) -> Callable[[], None]:
    def interrupt() -> None:
        if spark is not None and hasattr(spark, "interruptTag"):
            spark.interruptTag(tag)
    return interrupt
