"""The dispatcher: the backlog between decide and the actors, drained fairly and only into free capacity.

With ``AO_DISPATCH=rpq`` a submitted action is recorded in PostgreSQL and enqueued in the reliable
priority queue (namespace ``ao:rpq``) instead of being sent to Celery. One dispatcher process (``python -m
scheduler.dispatcher``) leases items by weighted fair sharing (classes by ``AO_PRIORITY_WEIGHTS``, tables
by their tracked ``weight``) while fewer than ``AO_DISPATCH_SLOTS`` leases are out and the table has fewer
than ``AO_DISPATCH_PER_TABLE``, and sends each lease to its class's Celery actor queue. The actor extends
the lease while it works and acks it when the action is terminal (freeing the slot) or nacks it with a
delay on Retry; if the actor dies, the lease expires and the dispatcher sends the item again (the action
id makes a second run harmless).

PostgreSQL stays the source of truth: every action in state queued or running is re-enqueued
(idempotently) when the dispatcher starts, every ``rebuild_seconds``, and at once when the queue's marker
key has vanished (Redis lost its data).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import redis
from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.fairness import FairScheduler, PriorityClass
from autooptimize.errors import InvalidArgument, ServiceUnavailable
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable
from autooptimize.storage.repositories import tracked_tables
from scheduler import service_settings, stop_on_signals
from scheduler.rpq import Dispatcher, Lease, QueueItem, ReliablePriorityQueue

__all__ = [
    "NAMESPACE",
    "LeaseKeeper",
    "LeaseTicket",
    "build_queue",
    "build_scheduler",
    "enqueue_action",
    "main",
    "make_dispatcher",
    "pending_items",
    "rebuild_from_postgres",
    "run_dispatcher",
    "wake",
]

log = logging.getLogger("autooptimize.dispatcher")

NAMESPACE = "ao:rpq"
REBUILD_SECONDS = 60.0
PENDING_STATES = (ActionState.QUEUED.value, ActionState.RUNNING.value)


@dataclass(frozen=True)
class LeaseTicket:
    """What an actor needs to keep, ack or nack its lease: the lease, its queue's namespace and term."""

    lease: Lease
    namespace: str
    lease_seconds: float

    def to_json(self) -> str:
        data = json.loads(self.lease.to_json())
        data.update(namespace=self.namespace, lease_seconds=self.lease_seconds)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, payload: str | bytes) -> LeaseTicket:
        try:
            data = json.loads(payload)
            ticket = cls(Lease.from_json(payload), str(data["namespace"]), float(data["lease_seconds"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"lease must be the JSON of a LeaseTicket, got {payload!r:.200} ({exc})") from None
        if not ticket.namespace or not ticket.lease_seconds > 0:
            raise InvalidArgument(f"lease needs a namespace and a positive lease_seconds, got {payload!r:.200}")
        return ticket


@functools.lru_cache(maxsize=8)
def _client(url: str) -> redis.Redis:
    # redis-py reconnects after a fork, so one cached client per URL is safe in prefork workers
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)


def _namespace(namespace: str | None) -> str:
    return NAMESPACE if namespace is None else namespace


def build_queue(settings: Settings, namespace: str | None = None, *,
                lease_seconds: float | None = None) -> ReliablePriorityQueue:
    """The reliable priority queue on ``settings.redis_url``, classes from ``settings.priority_classes``."""
    return ReliablePriorityQueue(
        _client(settings.redis_url), _namespace(namespace),
        lease_seconds=settings.lease_seconds if lease_seconds is None else lease_seconds,
        classes=settings.priority_classes,
    )


def wake(settings: Settings, namespace: str | None = None) -> None:
    """Tell an idle dispatcher there is work or free capacity (it otherwise looks once a second)."""
    key = f"{_namespace(namespace)}:wake"
    pipe = _client(settings.redis_url).pipeline(transaction=False)
    pipe.lpush(key, 1)
    pipe.ltrim(key, 0, 0)
    pipe.execute()


def enqueue_action(settings: Settings, action_id: str, table: str, partition: str | None, kind: str,
                   priority_class: str, *, namespace: str | None = None) -> bool:
    """Put a recorded action in the backlog; True when new (False: an item for that partition and kind is
    already queued or running). ``partition`` is the partition key, None or '' for the whole table."""
    queue = build_queue(settings, namespace)
    added = queue.enqueue(QueueItem(action_id, table, partition or "", kind, priority_class))
    wake(settings, namespace)
    return added


def pending_items(settings: Settings) -> list[QueueItem]:
    """Every action PostgreSQL holds as queued or running (dry runs excepted), oldest first, as queue items.

    An action of a priority class no longer configured goes to the least urgent class, with a warning.
    """
    fallback = settings.priority_classes[-1]
    with session_scope(settings) as session:
        rows = session.execute(
            select(Action.id, TrackedTable.identifier, Action.partition_key, Action.kind, Action.priority_class,
                   Action.created_at, Action.options)
            .join(TrackedTable, TrackedTable.id == Action.table_id)
            .where(Action.state.in_(PENDING_STATES), TrackedTable.catalog == settings.catalog)
            .order_by(Action.created_at, Action.id)
        ).all()
    items = []
    for action_id, table, partition, kind, cls, created_at, options in rows:
        if (options or {}).get("dry_run"):
            continue
        if cls not in settings.priority_classes:
            log.warning("action %s has priority class %r, not among %s; queued as %r",
                        action_id, cls, ", ".join(settings.priority_classes), fallback)
            cls = fallback
        items.append(QueueItem(action_id, table, partition or "", kind, cls,
                               enqueued_at=created_at.timestamp() if created_at else None))
    return items


def rebuild_from_postgres(settings: Settings, *, namespace: str | None = None) -> int:
    """Re-enqueue every queued or running action (idempotent); returns how many were missing from Redis.

    Items already queued, leased or delayed are left as they are; a running action whose lease Redis lost
    is queued again, and its second run only records what the first committed.
    """
    queue = build_queue(settings, namespace)
    added = queue.rebuild(pending_items(settings)).added
    _client(settings.redis_url).set(f"{queue.namespace}:rebuilt", repr(time.time()))
    return added


def load_table_weights(settings: Settings) -> dict[str, float]:
    """Tracked tables' fair-share weights (``ao_tracked_tables.weight``)."""
    with session_scope(settings) as session:
        return {t.identifier: float(t.weight) for t in tracked_tables(session, settings.catalog) if t.weight > 0}


def build_scheduler(settings: Settings, table_weights: dict[str, float] | None = None) -> FairScheduler:
    """Deficit round robin over classes (``settings.class_weights``) and, inside a class, over tables."""
    weights = settings.class_weights
    classes = [PriorityClass(name, weights[name]) for name in settings.priority_classes]
    return FairScheduler(classes, table_weights=table_weights or {})


def make_dispatcher(settings: Settings, *, namespace: str | None = None,
                    submit: Callable[[Lease], None] | None = None) -> Dispatcher:
    """A Dispatcher that sends each lease to Celery (``tasks.dispatch.send_leased_action``) unless ``submit``
    is given; ``settings.dispatch_slots`` leases at most, ``settings.dispatch_per_table`` per table."""
    queue = build_queue(settings, namespace)

    def send(lease: Lease) -> None:
        from tasks.dispatch import send_leased_action

        send_leased_action(settings, LeaseTicket(lease, queue.namespace, queue.lease_seconds))

    return Dispatcher(queue, build_scheduler(settings), submit or send, slots=settings.dispatch_slots,
                      per_table=settings.dispatch_per_table)


def run_dispatcher(settings: Settings, stop_event: threading.Event, *, namespace: str | None = None,
                   rebuild_seconds: float = REBUILD_SECONDS, idle_seconds: float = 1.0,
                   submit: Callable[[Lease], None] | None = None) -> None:
    """Dispatch until ``stop_event`` is set.

    Rebuilds from PostgreSQL (and reloads table weights) at start, every ``rebuild_seconds`` and as soon
    as Redis has lost the queue; each pass reclaims expired leases and dispatches while there is capacity;
    when nothing moved it waits up to ``idle_seconds`` for a :func:`wake`. An unreachable Redis or
    PostgreSQL, or a failed send (the item goes back to its queue), is logged and retried.
    """
    if not (rebuild_seconds > 0 and idle_seconds > 0):
        raise InvalidArgument(f"rebuild_seconds and idle_seconds must be > 0, got {rebuild_seconds}, {idle_seconds}")
    from scheduler.listener import Leadership

    dispatcher = make_dispatcher(settings, namespace=namespace, submit=submit)
    ns = dispatcher.queue.namespace
    client = _client(settings.redis_url)
    log.info("dispatcher on %s: %d slots, %d per table, lease %.0f s, weights %s", ns, dispatcher.slots,
             dispatcher.per_table, dispatcher.queue.lease_seconds, settings.class_weights)
    # One dispatcher per namespace works (its fairness state is in this process); others stand by.
    leadership = Leadership(settings, role=f"dispatcher:{ns}")
    try:
        _dispatch_loop(settings, stop_event, dispatcher, leadership, client, ns, rebuild_seconds, idle_seconds)
    finally:
        leadership.release()


def _dispatch_loop(settings: Settings, stop_event: threading.Event, dispatcher: Any, leadership: Any, client: Any,
                   ns: str, rebuild_seconds: float, idle_seconds: float) -> None:
    next_rebuild = 0.0
    standing_by = False
    while not stop_event.is_set():
        if not leadership.hold():
            if not standing_by:
                log.info("another dispatcher is active on %s; standing by", ns)
                standing_by = True
            stop_event.wait(max(idle_seconds, 1.0))
            continue
        if standing_by:
            next_rebuild = 0.0  # taking over: start from PostgreSQL's view of the backlog
            standing_by = False
        moved = False
        try:
            now = time.monotonic()
            if now >= next_rebuild or not client.exists(f"{ns}:rebuilt"):
                added = rebuild_from_postgres(settings, namespace=ns)
                dispatcher.scheduler.set_table_weights(load_table_weights(settings))
                next_rebuild = now + rebuild_seconds
                if added:
                    log.info("rebuilt the backlog from PostgreSQL: %d action(s) re-enqueued", added)
            moved = bool(dispatcher.run_once())
        except (ServiceUnavailable, redis.RedisError) as exc:
            log.warning("dispatcher waiting for Redis: %s", exc)
            stop_event.wait(idle_seconds)
            continue
        except Exception as exc:  # PostgreSQL away, or the broker refused a send: try again shortly
            log.warning("dispatch pass failed (%s: %s); retrying", type(exc).__name__, exc)
            stop_event.wait(idle_seconds)
            continue
        if not moved:
            try:
                client.blpop([f"{ns}:wake"], timeout=idle_seconds)
            except redis.RedisError:
                stop_event.wait(idle_seconds)
    log.info("dispatcher stopped")


class LeaseKeeper:
    """Extends a lease every ``interval`` seconds on a thread while the work runs (a context manager).

    ``lost`` becomes True when the queue no longer knows the lease (it expired and was reclaimed, or Redis
    lost it): the item may then run elsewhere, which the action id makes harmless.
    """

    def __init__(self, queue: ReliablePriorityQueue, lease: Lease, *, seconds: float, interval: float) -> None:
        if not (interval > 0 and seconds > interval):
            raise InvalidArgument(f"need 0 < interval < seconds, got interval={interval}, seconds={seconds}")
        self._queue, self._lease, self._seconds, self._interval = queue, lease, seconds, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.item.action_id}", daemon=True)
        self.lost = False

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                renewed = self._queue.extend(self._lease, self._seconds)
            except ServiceUnavailable as exc:
                log.warning("could not extend the lease of %s: %s", self._lease.item.action_id, exc)
                continue
            if renewed is None:
                self.lost = True
                log.warning("lease of %s was lost; the dispatcher may send it again", self._lease.item.action_id)
                return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m scheduler.dispatcher``; stops on SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="autooptimize dispatcher",
                                     description="Feed the actors from the reliable priority queue, fairly.")
    parser.add_argument("--rebuild-seconds", type=float, default=REBUILD_SECONDS,
                        help=f"seconds between rebuilds from PostgreSQL (default {REBUILD_SECONDS:.0f})")
    parser.add_argument("--rebuild-only", action="store_true",
                        help="re-enqueue the pending actions from PostgreSQL, print how many, and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    if args.rebuild_seconds <= 0:
        parser.error(f"--rebuild-seconds must be > 0, got {args.rebuild_seconds}")
    settings = service_settings("autooptimize dispatcher", args.verbose)
    if settings is None:
        return 2
    if args.rebuild_only and settings.dispatch == "rpq":
        print(rebuild_from_postgres(settings))
        return 0
    if settings.dispatch != "rpq":
        # submissions already go straight to Celery: rebuilding would send every pending action twice
        print(f"autooptimize dispatcher: AO_DISPATCH is {settings.dispatch!r}; set AO_DISPATCH=rpq to use it",
              file=sys.stderr)
        return 2
    stop = stop_on_signals(log)
    run_dispatcher(settings, stop, rebuild_seconds=args.rebuild_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
