"""The dispatcher: the backlog between decide and the actors, drained fairly and only into free capacity.

With ``AO_DISPATCH=rpq`` a submitted action is recorded in PostgreSQL and enqueued in the reliable
priority queue (namespace ``ao:rpq``) instead of being sent to Celery. One dispatcher process (``python -m
scheduler.dispatcher``) leases items by weighted fair sharing (``AO_FAIRNESS``: DWRR or WRR; classes by
``AO_PRIORITY_WEIGHTS``, inside a class tenants by ``AO_TENANT_WEIGHTS``, inside a tenant tables by their
tracked ``weight``; classes in ``AO_URGENT_CLASSES`` first, fixed-priority) while fewer than
``AO_DISPATCH_SLOTS`` leases are out, the table has fewer than ``AO_DISPATCH_PER_TABLE`` and its tenant fewer
than ``AO_TENANT_MAX_CONCURRENT`` (never two on one partition, whatever the kinds: tasks.rpq), and sends
each lease to its class's Celery actor queue. Urgent is preemptive only in the order of service: a running
action is never stopped, so an urgent action waits for at most one running action to finish (the first
slot that frees is its). Each dispatch is counted per tenant (scheduler/tenants.py). The actor extends the
lease while it works and acks it when the action is terminal (freeing the slot) or nacks it with a delay
on Retry; if the actor dies, the lease expires and the dispatcher sends it again (harmless: the action id).

PostgreSQL stays the source of truth: every action in state queued or running is re-enqueued
(idempotently) when the dispatcher starts, every ``rebuild_seconds``, and at once when the queue's marker
key has vanished (Redis lost its data); then the sweeper (services/sweeper.py) re-queues, or fails past
AO_MAX_ATTEMPTS, actions left running by a dead attempt. The dispatcher holds its role under an advisory
lock and re-checks it before every lease it hands out.
"""

from __future__ import annotations

import argparse
import logging
import operator
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.fairness import FairScheduler, Head, Pick, PriorityClass, TenantCaps, default_tenant
from autooptimize.errors import InvalidArgument, ServiceUnavailable
from autooptimize.services.ports import ActionTicket
from autooptimize.services.sweeper import sweep_actions
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable
from scheduler import service_settings, stop_on_signals
from scheduler.listener import Leadership
from scheduler.tenants import ShareRecorder, Tenancy, in_flight_by_tenant, load_tenancy
from tasks.rpq import (
    NAMESPACE,
    Backlog,
    Lease,
    LeaseKeeper,
    LeaseTicket,
    QueueItem,
    ReliablePriorityQueue,
    build_queue,
    enqueue_action,
    queue_client,
    wake,
)
from tasks.send import send_leased_action

# The queue's own names (NAMESPACE .. wake) live in tasks.rpq; they stay importable from here.
__all__ = [
    "NAMESPACE",
    "Dispatcher",
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
    "sweep_into",
    "wake",
]

log = logging.getLogger("autooptimize.dispatcher")

REBUILD_SECONDS = 60.0
PENDING_STATES = (ActionState.QUEUED.value, ActionState.RUNNING.value)


class Dispatcher:
    """Moves items from the queue to actors, fairly, and only while actors have capacity.

    Each dispatch: read the backlog, offer the scheduler every (class, table) queue, marked blocked when
    its table already has ``per_table`` leases or its tenant (by ``tenancy``, which the scheduler should
    share) has its cap of ``tenant_caps`` out, lease the head of the queue it picks, hand the lease to
    ``submit`` (e.g. a function that sends the Celery task; the actor acks or nacks the lease, and extends
    it while it works), then to ``record`` (tenant, lease, pick, the backlog it was chosen from, when that was read). Nothing is dispatched while ``slots`` leases are out. One dispatcher
    should run per namespace (the scheduler's state is in memory); running two is safe, only less fair.
    With ``still_active`` (the dispatcher's leadership) the role is re-checked before every lease.
    """

    def __init__(
        self,
        queue: ReliablePriorityQueue,
        scheduler: FairScheduler,
        submit: Callable[[Lease], None],
        *,
        slots: int,
        per_table: int = 1,
        still_active: Callable[[], bool] | None = None,
        tenancy: Tenancy | None = None,
        tenant_caps: TenantCaps | None = None,
        record: Callable[[str, Lease, Pick, Backlog, float], None] | None = None,
    ) -> None:
        if operator.index(slots) < 1:
            raise InvalidArgument(f"slots must be a positive integer (actor capacity), got {slots!r}")
        if operator.index(per_table) < 1:
            raise InvalidArgument(f"per_table must be a positive integer, got {per_table!r}")
        self.queue = queue
        self.scheduler = scheduler
        self.submit = submit
        self.slots = int(slots)
        self.per_table = int(per_table)
        self.still_active = still_active
        self.tenancy = tenancy if tenancy is not None else Tenancy()
        self.tenant_of = self.tenancy.tenant
        self.tenant_caps = tenant_caps or TenantCaps()
        self.record = record
        self._known = {c.name for c in scheduler.classes}
        self._warned: set[str] = set()

    def dispatch_once(self) -> Lease | None:
        """Dispatch at most one item; None when there is no capacity or nothing eligible, or when
        ``still_active`` (asked before every lease) says this dispatcher lost its role.

        If ``submit`` raises, the item goes back to its queue at once and the error propagates.
        """
        read_at = time.time()
        backlog = self.queue.snapshot()
        if backlog.leased >= self.slots:
            return None
        # asked after the read (a wake then sees the backlog at once) and before anything is leased
        if self.still_active is not None and not self.still_active():
            log.warning("dispatcher lost its lock; dispatching nothing more")
            return None
        heads = []
        capped = self._tenants_at_cap(backlog)
        for (cls, table), (_, cost) in backlog.queues.items():
            if cls not in self._known:
                if cls not in self._warned:
                    log.warning("queue holds items of priority class %r, which the scheduler does not know", cls)
                    self._warned.add(cls)
                continue
            full = backlog.in_flight.get(table, 0) >= self.per_table or (cls, table) in backlog.busy
            heads.append(Head(cls, table, cost, blocked=full or (bool(capped) and self.tenant_of(table) in capped)))
        pick = self.scheduler.pick(heads)
        if pick is None:
            return None
        lease = self.queue.dequeue(
            pick.priority_class, pick.table, per_table_limit=self.per_table, slots=self.slots
        )
        if lease is None:  # another dispatcher got there first
            return None
        try:
            self.submit(lease)
        except BaseException:
            try:
                self.queue.nack(lease)
            except ServiceUnavailable:
                log.warning("could not give %s back; it returns when its lease expires", lease.item.key)
            raise
        if self.record is not None:
            try:
                self.record(self.tenant_of(pick.table), lease, pick, backlog, read_at)
            except (ServiceUnavailable, redis.RedisError) as exc:  # the share figures miss one; dispatch goes on
                log.warning("could not count the dispatch of %s: %s", lease.item.key, exc)
        return lease

    def reload(self, tenancy: Tenancy) -> None:
        """Take tables' tenants and weights from ``tenancy`` (e.g. :func:`scheduler.tenants.load_tenancy`)."""
        self.tenancy.replace(tenancy)
        self.scheduler.set_table_weights(tenancy.weights)

    def _tenants_at_cap(self, backlog: Any) -> set[str]:
        if self.tenant_caps.unlimited:
            return set()
        out = in_flight_by_tenant(backlog, self.tenant_of)
        return {t for t, n in out.items() if (cap := self.tenant_caps.cap(t)) is not None and n >= cap}

    def run_once(self, limit: int | None = None) -> list[Lease]:
        """Reclaim expired leases, then dispatch until capacity or eligible work runs out (or ``limit``)."""
        self.queue.reclaim_expired()
        leases: list[Lease] = []
        while limit is None or len(leases) < limit:
            lease = self.dispatch_once()
            if lease is None:
                break
            leases.append(lease)
        return leases

    def run_forever(self, stop: threading.Event, idle_seconds: float = 1.0) -> None:
        """Loop :meth:`run_once` until ``stop`` is set, sleeping ``idle_seconds`` when nothing moved.

        An unreachable Redis is logged and retried after ``idle_seconds``; errors from ``submit`` propagate.
        """
        while not stop.is_set():
            try:
                moved = bool(self.run_once())
            except ServiceUnavailable as exc:
                log.warning("dispatcher waiting for Redis: %s", exc)
                moved = False
            if not moved:
                stop.wait(idle_seconds)


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
    queue_client(settings).set(f"{queue.namespace}:rebuilt", repr(time.time()))
    return added


def build_scheduler(settings: Settings, table_weights: dict[str, float] | None = None,
                    tenant_of: Callable[[str], str] = default_tenant) -> FairScheduler:
    """Classes (``settings.class_weights``; ``settings.urgent_classes`` served first, fixed-priority), then
    inside a class tenants (``tenant_of``, ``settings.tenant_weight_map``), then a tenant's tables, each
    level shared by ``settings.fairness`` (DWRR or smooth WRR)."""
    weights = settings.class_weights
    classes = [PriorityClass(name, weights[name], urgent=name in settings.urgent_classes)
               for name in settings.priority_classes]
    return FairScheduler(classes, class_policy=settings.fairness, table_policy=settings.fairness,
                         table_weights=table_weights or {}, tenant_of=tenant_of,
                         tenant_weights=settings.tenant_weight_map)


def make_dispatcher(settings: Settings, *, namespace: str | None = None,
                    submit: Callable[[Lease], None] | None = None,
                    still_active: Callable[[], bool] | None = None) -> Dispatcher:
    """A Dispatcher that sends each lease to Celery (``tasks.send.send_leased_action``) unless ``submit``
    is given; ``settings.slots`` leases at most, ``settings.dispatch_per_table`` per table, the tenant caps
    of ``settings.tenant_caps``; dispatches are counted per tenant. Its ``tenancy`` (table -> tenant and
    weight) starts empty: :func:`run_dispatcher` loads it from PostgreSQL (:meth:`Dispatcher.reload`)."""
    queue = build_queue(settings, namespace)
    tenancy = Tenancy()

    def send(lease: Lease) -> None:
        send_leased_action(settings, LeaseTicket(lease, queue.namespace, queue.lease_seconds))

    return Dispatcher(queue, build_scheduler(settings, tenant_of=tenancy.tenant), submit or send,
                      slots=settings.slots, per_table=settings.dispatch_per_table, still_active=still_active,
                      tenancy=tenancy, tenant_caps=settings.tenant_caps,
                      record=ShareRecorder(queue_client(settings), queue.namespace).record)


def sweep_into(settings: Settings, queue: ReliablePriorityQueue) -> dict[str, list[str]]:
    """Run the sweeper (services/sweeper.py) with ``queue`` as where re-queued actions go: an action whose
    item the queue holds is only waiting its turn."""
    def send(ticket: ActionTicket) -> None:
        enqueue_action(settings, ticket.action_id, ticket.table, ticket.partition, ticket.kind,
                       ticket.priority_class, namespace=queue.namespace)

    def queued(ticket: ActionTicket) -> bool:
        return queue.holds(QueueItem(ticket.action_id, ticket.table, ticket.partition or "", ticket.kind,
                                     ticket.priority_class).key)

    return sweep_actions(settings, send, queued).as_dict()


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

    # One dispatcher per namespace works (its fairness state is in this process); others stand by.
    ns = build_queue(settings, namespace).namespace
    leadership = Leadership(settings, role=f"dispatcher:{ns}")
    dispatcher = make_dispatcher(settings, namespace=namespace, submit=submit, still_active=leadership.held)
    client = queue_client(settings)
    log.info("dispatcher on %s: %d slots, %d per table, lease %.0f s, weights %s, %s, urgent %s, tenants %s, "
             "tenant caps %s", ns, dispatcher.slots, dispatcher.per_table, dispatcher.queue.lease_seconds,
             settings.class_weights, settings.fairness, list(settings.urgent_classes) or "none",
             settings.tenant_weight_map or "all 1", settings.tenant_max_concurrent or "none")
    try:
        _dispatch_loop(settings, stop_event, dispatcher, leadership, client, ns, rebuild_seconds, idle_seconds)
    finally:
        leadership.release()


def _dispatch_loop(settings: Settings, stop_event: threading.Event, dispatcher: Any, leadership: Any, client: Any,
                   ns: str, rebuild_seconds: float, idle_seconds: float) -> None:
    next_rebuild = confirmed = 0.0
    standing_by = False
    while not stop_event.is_set():
        # the role is asked of PostgreSQL before every lease (dispatch_once); here, to stand by or take
        # over, at most once a second while active, so that a wake reaches the backlog without a round trip
        if standing_by or time.monotonic() - confirmed >= 1.0:
            if not leadership.hold():
                if not standing_by:
                    log.info("another dispatcher is active on %s; standing by", ns)
                    standing_by = True
                stop_event.wait(max(idle_seconds, 1.0))
                continue
            confirmed = time.monotonic()
        if standing_by:
            next_rebuild = 0.0  # taking over: start from PostgreSQL's view of the backlog
            standing_by = False
        moved = False
        try:
            now = time.monotonic()
            if now >= next_rebuild or not client.exists(f"{ns}:rebuilt"):
                added = rebuild_from_postgres(settings, namespace=ns)
                dispatcher.reload(load_tenancy(settings))
                next_rebuild = now + rebuild_seconds
                if added:
                    log.info("rebuilt the backlog from PostgreSQL: %d action(s) re-enqueued", added)
                if leadership.held():  # actions a dead worker left running, or out of attempts
                    sweep_into(settings, dispatcher.queue)
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
