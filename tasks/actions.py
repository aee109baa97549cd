"""Actor tasks, one per action kind (``autooptimize.<kind>``): take an action id, call the service, map
errors to retries. Every kind runs the same service call; the name only tells Flower what runs."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from autooptimize.config import Settings, get_settings
from autooptimize.errors import ActionNotFound, Retry, ServiceUnavailable
from autooptimize.services import actions
from autooptimize.services.kinds import KINDS
from tasks.app import app
from tasks.retry import MAX_RETRIES, backoff_delay
from tasks.routing import task_name
from tasks.rpq import LeaseKeeper, LeaseTicket, build_queue, wake

log = logging.getLogger(__name__)


def execute_action(task: Task, action_id: str, lease: str | None = None) -> dict:
    """Execute action ``action_id`` (idempotent: re-running a finished action only reports it).

    With ``lease`` (a :class:`tasks.rpq.LeaseTicket` as JSON) the action came from the reliable priority
    queue: see :func:`_execute_leased`. Otherwise a Retry becomes a Celery retry with backoff, and the
    action fails for good after MAX_RETRIES.
    """
    settings = get_settings()
    if lease is not None:
        return _execute_leased(settings, action_id, lease)
    try:
        outcome = actions.execute(settings, action_id)
    except Retry as exc:
        if task.request.retries >= MAX_RETRIES:
            return actions.fail_permanently(settings, action_id, str(exc))
        raise task.retry(countdown=backoff_delay(exc.delay, task.request.retries), exc=None) from None
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return _summary(outcome)


def _register(kind: str) -> Task:
    def run(self: Task, action_id: str, lease: str | None = None) -> dict:
        return execute_action(self, action_id, lease)

    run.__name__ = run.__qualname__ = kind
    run.__doc__ = f"Execute {kind} action ``action_id``: see :func:`execute_action`."
    return app.task(name=task_name(kind), bind=True, max_retries=MAX_RETRIES)(run)


# One task per kind, named by tasks.routing.task_name (the sender uses the same rule).
ACTION_TASKS: dict[str, Task] = {kind: _register(kind) for kind in KINDS}


def _summary(outcome: dict) -> dict:
    return {k: outcome[k] for k in ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out",
                                    "snapshot_id")}


def _execute_leased(settings: Settings, action_id: str, payload: str) -> dict:
    """Execute under a lease: extended every third of its term while running, acked once the action is
    terminal (freeing the dispatcher's slot), nacked with a backoff on Retry (no Celery retry). If this
    process dies the lease expires and the dispatcher sends the item again. A lease already lost when the
    task starts (a stale or duplicate message) is not run: the queue or PostgreSQL still holds the item."""
    ticket = LeaseTicket.from_json(payload)
    queue = build_queue(settings, ticket.namespace, lease_seconds=ticket.lease_seconds)
    lease = ticket.lease
    try:
        if queue.extend(lease, ticket.lease_seconds) is None:
            log.warning("action %s: lease lost before start (delivery %d); skipped", action_id, lease.deliveries)
            return {"id": action_id, "state": "lease_lost"}
    except ServiceUnavailable as exc:  # run anyway: execution is idempotent, the keeper retries
        log.warning("action %s: cannot confirm the lease (%s); running", action_id, exc)
    with LeaseKeeper(queue, lease, seconds=ticket.lease_seconds, interval=ticket.lease_seconds / 3):
        try:
            outcome: dict[str, Any] = actions.execute(settings, action_id)
        except Retry as exc:
            if lease.deliveries <= MAX_RETRIES:
                delay = backoff_delay(exc.delay, lease.deliveries - 1)
                queue.nack(lease, delay)
                wake(settings, ticket.namespace)
                log.info("action %s: retry in %.0f s (%s)", action_id, delay, exc)
                return {"id": action_id, "state": "retry", "delay": delay}
            outcome = actions.fail_permanently(settings, action_id, str(exc))
        except ActionNotFound:
            log.warning("action %s no longer exists; dropping it from the queue", action_id)
            outcome = {"id": action_id, "state": "not_found", "reason": None, "files_in": None,
                       "files_out": None, "rows_in": None, "rows_out": None, "snapshot_id": None}
    if not queue.ack(lease):
        log.warning("action %s: lease was lost before the ack; a redelivery will find it done", action_id)
    wake(settings, ticket.namespace)
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return _summary(outcome)

