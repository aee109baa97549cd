"""Actor tasks, one per action kind (``autooptimize.<kind>``): take an action id, call the service, map
errors to retries. Every kind runs the same service call; the name only tells Flower what runs."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from autooptimize.config import Settings, get_settings
from autooptimize.errors import ActionBusy, ActionNotFound, Retry, ServiceUnavailable
from autooptimize.services import actions
from autooptimize.services.attempt import attempt_limit_seconds
from autooptimize.services.kinds import KINDS
from autooptimize.services.ports import ActionTicket
from autooptimize.services.sweeper import sweep_actions as sweep
from tasks.app import app
from tasks.retry import MAX_RETRIES, backoff_delay
from tasks.routing import task_name
from tasks.rpq import LeaseKeeper, LeaseTicket, QueueItem, build_queue, wake
from tasks.send import CeleryDispatch

log = logging.getLogger(__name__)


def execute_action(task: Task, action_id: str, lease: str | None = None) -> dict:
    """Execute action ``action_id`` (idempotent: re-running a finished action only reports it).

    With ``lease`` (a :class:`tasks.rpq.LeaseTicket` as JSON) the action came from the reliable priority
    queue: see :func:`_execute_leased`. Otherwise a Retry becomes a Celery retry with backoff. A delivery
    that finds another attempt alive (ActionBusy) comes back once that attempt's lease would have run
    out, and is dropped after MAX_RETRIES: it never touches the live attempt's work. The action itself
    fails only through AO_MAX_ATTEMPTS (counted in PostgreSQL, services/execution.py); a message given
    up on here is found again by the sweeper (services/sweeper.py) if the action is left unfinished.
    """
    settings = get_settings()
    if lease is not None:
        return _execute_leased(settings, action_id, lease)
    try:
        outcome = actions.execute(settings, action_id)
    except ActionNotFound:
        log.warning("action %s no longer exists; message dropped", action_id)
        return {"id": action_id, "state": "not_found"}
    except Retry as exc:
        retries = task.request.retries
        if retries >= MAX_RETRIES:
            log.warning("action %s: message dropped after %d retries (%s); the sweeper re-queues the action "
                        "if it is left unfinished", action_id, retries, exc)
            return {"id": action_id, "state": "dropped", "reason": str(exc)}
        delay = exc.delay if isinstance(exc, ActionBusy) else backoff_delay(exc.delay, retries)
        log.info("action %s: retry in %.0f s (%s)", action_id, delay, exc)
        raise task.retry(countdown=delay, exc=None) from None
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return _summary(outcome)


def _register(kind: str) -> Task:
    def run(self: Task, action_id: str, lease: str | None = None) -> dict:
        return execute_action(self, action_id, lease)

    run.__name__ = run.__qualname__ = kind
    run.__doc__ = f"Execute {kind} action ``action_id``: see :func:`execute_action`."
    return app.task(name=task_name(kind), bind=True, max_retries=MAX_RETRIES,
                    **action_task_options(get_settings()))(run)


def action_task_options(settings: Settings) -> dict[str, Any]:
    """Celery options of every action task: a hard ``time_limit`` at the attempt limit, so an attempt
    that outlives its own stop is killed before its message could be redelivered (tasks/app.py)."""
    return {"time_limit": attempt_limit_seconds(settings)}


# One task per kind, named by tasks.routing.task_name (the sender uses the same rule).
ACTION_TASKS: dict[str, Task] = {kind: _register(kind) for kind in KINDS}


def _summary(outcome: dict) -> dict:
    return {k: outcome.get(k) for k in ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out",
                                        "snapshot_id")}


def _execute_leased(settings: Settings, action_id: str, payload: str) -> dict:
    """Execute under a queue lease: extended every third of its term while running, acked once the action is
    terminal (freeing the dispatcher's slot), nacked with a delay on Retry (no Celery retry). If this
    process dies the lease expires and the dispatcher sends the item again. A queue lease already lost when
    the task starts (a stale or duplicate message) is not run: the queue or PostgreSQL still holds the item.
    A delivery that finds another attempt holding the action's lease (ActionBusy) gives its item back with
    a delay, so it comes back once that attempt has ended or its lease ran out; it never acks for it."""
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
            delay = exc.delay if isinstance(exc, ActionBusy) else backoff_delay(exc.delay, lease.deliveries - 1)
            queue.nack(lease, delay)
            wake(settings, ticket.namespace)
            state = "busy" if isinstance(exc, ActionBusy) else "retry"
            log.info("action %s: %s, back in %.0f s (%s)", action_id, state, delay, exc)
            return {"id": action_id, "state": state, "delay": delay}
        except ActionNotFound:
            log.warning("action %s no longer exists; dropping it from the queue", action_id)
            outcome = {"id": action_id, "state": "not_found"}
    if not queue.ack(lease):
        log.warning("action %s: lease was lost before the ack; a redelivery will find it done", action_id)
    _hand_on(settings, lease.item, action_id)
    wake(settings, ticket.namespace)
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return _summary(outcome)


def _hand_on(settings: Settings, item: QueueItem, action_id: str) -> None:
    """Queue the actions recorded on this item's partition and kind while its item was held (after the ack,
    so the queue takes them: see :func:`autooptimize.services.actions.queued_behind`). A failure is logged;
    the sweeper still finds them."""
    try:
        for follower in actions.queued_behind(settings, item.table, item.partition or None, item.kind, action_id):
            CeleryDispatch(settings).action(follower)
            log.info("action %s: queued %s, recorded on the same partition while it ran", action_id,
                     follower.action_id)
    except Exception as exc:  # the sweeper is the backstop
        log.warning("action %s: could not queue the actions behind it (%s: %s)", action_id, type(exc).__name__, exc)


@app.task(name="autooptimize.sweep_actions")
def sweep_actions() -> dict[str, list[str]]:
    """Re-queue, or fail past AO_MAX_ATTEMPTS, actions left queued or running with no live lease
    (services/sweeper.py): through Celery, or the reliable priority queue in rpq mode."""
    settings = get_settings()
    queued = None
    if settings.dispatch == "rpq":
        queue = build_queue(settings)

        def queued(ticket: ActionTicket) -> bool:
            return queue.holds(QueueItem(ticket.action_id, ticket.table, ticket.partition or "", ticket.kind,
                                         ticket.priority_class).key)

    return sweep(settings, CeleryDispatch(settings).action, queued).as_dict()
