"""The one module that sends tasks (``send_task``): actions, leased actions and consolidations.

:class:`CeleryDispatch` implements the services' Dispatch port (``autooptimize.services.ports``) on these.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import redis

from autooptimize.config import Settings
from autooptimize.errors import ServiceUnavailable
from autooptimize.redact import redact
from autooptimize.services.ports import ActionTicket
from tasks.routing import BUFFER_QUEUE, CONTROL_QUEUE, actor_queue, task_name, task_priority
from tasks.rpq import LeaseTicket, enqueue_action

CONSOLIDATE_TASK = "autooptimize.consolidate"
# At most one queued consolidation per table; the task clears the key when it starts.
CONSOLIDATION_KEY = "ao:buffer:requested:{catalog}:{table}"
# Short, so a lost message (Redis flushed, queue purged) delays the next request by half a minute at most.
CONSOLIDATION_KEY_TTL = 30


def _unreachable(settings: Settings, exc: redis.RedisError) -> ServiceUnavailable:
    return ServiceUnavailable(redact(f"cannot reach Redis at {settings.redis_url}: {exc}"))


def check_broker(settings: Settings) -> None:
    """Raise ServiceUnavailable naming the URL (password masked) when Redis does not answer."""
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None


def _send_action(settings: Settings, kind: str, priority_class: str, *, kwargs: dict[str, Any],
                 label: dict[str, Any], task_id: str) -> None:
    """Send the task of ``kind`` to its class's actor queue; Flower shows ``label`` as the arguments."""
    from tasks.app import app

    app.send_task(
        task_name(kind),
        kwargs=kwargs,
        queue=actor_queue(priority_class),
        priority=task_priority(priority_class, settings.priority_classes),
        kwargsrepr=redact(repr(label)),  # Flower shows it to whoever logs in
        task_id=task_id,
    )


def send_action(settings: Settings, action_id: str, *, priority_class: str, label: dict[str, Any]) -> None:
    """Queue an action on its class's actor queue, as the task of its kind (``label["kind"]``); Flower shows
    ``label`` (table, partition, kind) beside the id."""
    _send_action(settings, label["kind"], priority_class, kwargs={"action_id": action_id},
                 label={"action_id": action_id, **label}, task_id=action_id)


def send_leased_action(settings: Settings, ticket: LeaseTicket) -> None:
    """Queue an action the dispatcher leased from the reliable priority queue, as the task of its kind.

    The task gets ``action_id`` and ``lease`` (the ticket as JSON: the lease, its queue's namespace and
    term) so the actor can extend, ack or nack it. A redelivery gets its own task id (``<id>.<n>``).
    """
    item, deliveries = ticket.lease.item, ticket.lease.deliveries
    _send_action(
        settings, item.kind, item.priority_class,
        kwargs={"action_id": item.action_id, "lease": ticket.to_json()},
        label={"action_id": item.action_id, "table": item.table, "partition": item.partition or None,
               "kind": item.kind, "delivery": deliveries},
        task_id=item.action_id if deliveries == 1 else f"{item.action_id}.{deliveries}",
    )


_clients: dict[tuple[int, str], redis.Redis] = {}
# Landing may run in several threads of one process; sends are rare, so they go one at a time.
_send_lock = threading.Lock()


def _redis(settings: Settings) -> redis.Redis:
    """The process's client (landing asks on every file: no new connection each time)."""
    key = (os.getpid(), settings.redis_url)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    return client


def send_consolidation(settings: Settings, identifier: str, *, flush: bool = False) -> bool:
    """Queue a consolidation of ``identifier`` on the buffer queue unless one is queued already (a flush
    is always sent). Returns whether a task was sent."""
    from tasks.app import app

    key = CONSOLIDATION_KEY.format(catalog=settings.catalog, table=identifier)
    try:
        client = _redis(settings)
        if not client.set(key, "1", nx=True, ex=CONSOLIDATION_KEY_TTL) and not flush:
            return False
        try:
            with _send_lock:
                kwargs = {"table": identifier, "flush": flush}
                app.send_task(CONSOLIDATE_TASK, kwargs=kwargs, kwargsrepr=redact(repr(kwargs)), queue=BUFFER_QUEUE)
        except BaseException:
            client.delete(key)  # not sent: the next landing or tick must be able to ask again
            raise
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None
    return True


def clear_consolidation_request(settings: Settings, identifier: str) -> None:
    """Forget the queued request: landings from now on may queue another consolidation."""
    try:
        _redis(settings).delete(CONSOLIDATION_KEY.format(catalog=settings.catalog, table=identifier))
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None


DECIDE_TASK = "autooptimize.decide"
SCAN_TASK = "autooptimize.scan"
# At most one queued decide task per table; the partitions it is to judge gather in a set beside it.
DECIDE_KEY = "ao:decide:requested:{catalog}:{table_id}"
DECIDE_PARTITIONS = "ao:decide:partitions:{catalog}:{table_id}"
# A lost message (Redis flushed, queue purged) holds a table's next request back this long at most; a
# queue slower than this only costs a second task, which finds nothing (or nothing new) to judge.
DECIDE_KEY_TTL = 120
DECIDE_PARTITIONS_TTL = 86400
# Decisions go ahead of scans on the control queue (0 is Celery-on-Redis's highest priority).
DECIDE_PRIORITY, SCAN_PRIORITY = 0, 6


def request_decide(settings: Settings, table_id: int, spec_id: int, partition_key: str) -> bool:
    """Ask a control worker to decide this partition: the partition joins its table's set, and a decide task
    is sent unless one is queued for the table already. Returns whether a task was sent."""
    from tasks.app import app

    key = DECIDE_KEY.format(catalog=settings.catalog, table_id=table_id)
    members = DECIDE_PARTITIONS.format(catalog=settings.catalog, table_id=table_id)
    try:
        client = _redis(settings)
        pipe = client.pipeline(transaction=True)  # the partition is in the set before the key can be seen
        pipe.sadd(members, json.dumps([spec_id, partition_key]))
        pipe.expire(members, DECIDE_PARTITIONS_TTL)
        pipe.set(key, "1", nx=True, ex=DECIDE_KEY_TTL)
        if not pipe.execute()[2]:
            return False
        try:
            with _send_lock:
                app.send_task(DECIDE_TASK, kwargs={"table_id": table_id}, queue=CONTROL_QUEUE,
                              priority=DECIDE_PRIORITY)
        except BaseException:
            client.delete(key)  # not sent: the next hand-over must be able to send
            raise
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None
    return True


def take_decide_requests(settings: Settings, table_id: int) -> list[tuple[int, str]]:
    """The partitions asked for since the table's decide task was sent, removed from the set. The key goes
    first: a partition added after that sends a task of its own, one added before is in what is taken."""
    key = DECIDE_KEY.format(catalog=settings.catalog, table_id=table_id)
    members = DECIDE_PARTITIONS.format(catalog=settings.catalog, table_id=table_id)
    try:
        client = _redis(settings)
        client.delete(key)
        pipe = client.pipeline(transaction=True)
        pipe.smembers(members)
        pipe.delete(members)
        taken = pipe.execute()[0]
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None
    pairs = [json.loads(m) for m in taken]
    return sorted((int(spec_id), str(partition_key)) for spec_id, partition_key in pairs)


def decide_requester(settings: Settings) -> Callable[[int, int, str], None]:
    """The listener's ``on_attention`` when it does not decide itself (AO_DECIDE_INLINE off)."""

    def request(table_id: int, spec_id: int, partition_key: str) -> None:
        request_decide(settings, table_id, spec_id, partition_key)

    return request


def send_scan(settings: Settings, tables: list[str]) -> None:
    """Queue one scan task for ``tables`` (whole scans before their snapshots can be followed) on the
    control queue, behind any decide task."""
    from tasks.app import app

    try:
        with _send_lock:
            app.send_task(SCAN_TASK, kwargs={"tables": list(tables)}, queue=CONTROL_QUEUE, priority=SCAN_PRIORITY,
                          kwargsrepr=redact(repr({"tables": len(tables)})))
    except redis.RedisError as exc:
        raise _unreachable(settings, exc) from None


class CeleryDispatch:
    """Sends actions and consolidations as Celery tasks, through the reliable priority queue in rpq mode."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check(self) -> None:
        check_broker(self.settings)

    def action(self, ticket: ActionTicket) -> None:
        if self.settings.dispatch == "rpq":
            enqueue_action(self.settings, ticket.action_id, ticket.table, ticket.partition, ticket.kind,
                           ticket.priority_class)
            return
        send_action(self.settings, ticket.action_id, priority_class=ticket.priority_class,
                    label={"table": ticket.table, "partition": ticket.partition, "kind": ticket.kind})

    def consolidation(self, identifier: str, *, flush: bool = False) -> bool:
        return send_consolidation(self.settings, identifier, flush=flush)

    def consolidation_started(self, identifier: str) -> None:
        clear_consolidation_request(self.settings, identifier)
