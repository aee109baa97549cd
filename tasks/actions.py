"""Actor tasks: take an action id, call the service, map errors to retries."""

from __future__ import annotations

import logging

from celery import Task

from autooptimize.config import Settings, get_settings
from autooptimize.errors import ActionNotFound, Retry, ServiceUnavailable
from autooptimize.services import actions
from tasks.app import app

log = logging.getLogger(__name__)
MAX_RETRIES = 8


@app.task(name="autooptimize.merge", bind=True, max_retries=MAX_RETRIES)
def merge(self: Task, action_id: str, lease: str | None = None) -> dict:
    """Execute merge action ``action_id`` (idempotent: re-running a finished action only reports it).

    With ``lease`` (a :class:`scheduler.dispatcher.LeaseTicket` as JSON) the action came from the
    reliable priority queue: see :func:`_merge_leased`.
    """
    settings = get_settings()
    if lease is not None:
        return _merge_leased(settings, action_id, lease)
    try:
        outcome = actions.execute(settings, action_id)
    except Retry as exc:
        if self.request.retries >= MAX_RETRIES:
            return actions.fail_permanently(settings, action_id, str(exc))
        raise self.retry(countdown=min(300, exc.delay * (2 ** self.request.retries)), exc=None) from None
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return _summary(outcome)


def _summary(outcome: dict) -> dict:
    return {k: outcome[k] for k in ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out",
                                    "snapshot_id")}


def _merge_leased(settings: Settings, action_id: str, payload: str) -> dict:
    """Execute under a lease: extended every third of its term while running, acked once the action is
    terminal (freeing the dispatcher's slot), nacked with a backoff on Retry (no Celery retry). If this
    process dies the lease expires and the dispatcher sends the item again. A lease already lost when the
    task starts (a stale or duplicate message) is not run: the queue or PostgreSQL still holds the item."""
    from scheduler.dispatcher import LeaseKeeper, LeaseTicket, build_queue, wake

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
            outcome = actions.execute(settings, action_id)
        except Retry as exc:
            if lease.deliveries <= MAX_RETRIES:
                delay = min(300.0, exc.delay * 2 ** (lease.deliveries - 1))
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
