"""The reliable priority queue between decide and the actors (``AO_DISPATCH=rpq``), on the service's Redis.

Submitting enqueues an item (:func:`enqueue_action`); the dispatcher (``scheduler.dispatcher``) leases
items fairly and sends them to the actors, which extend, ack or nack their lease (:mod:`tasks.actions`).
"""

from __future__ import annotations

import functools

import redis

from autooptimize.config import Settings
from tasks.rpq.item import Backlog, QueueItem, RebuildResult
from tasks.rpq.lease import Lease, LeaseKeeper, LeaseTicket
from tasks.rpq.queue import ReliablePriorityQueue

__all__ = [
    "NAMESPACE",
    "Backlog",
    "Lease",
    "LeaseKeeper",
    "LeaseTicket",
    "QueueItem",
    "RebuildResult",
    "ReliablePriorityQueue",
    "build_queue",
    "enqueue_action",
    "queue_client",
    "wake",
]

NAMESPACE = "ao:rpq"


@functools.lru_cache(maxsize=8)
def _client(url: str) -> redis.Redis:
    # redis-py reconnects after a fork, so one cached client per URL is safe in prefork workers
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)


def queue_client(settings: Settings) -> redis.Redis:
    """The process's shared Redis client for the queue on ``settings.redis_url`` (safe across forks)."""
    return _client(settings.redis_url)


def namespace_or_default(namespace: str | None) -> str:
    return NAMESPACE if namespace is None else namespace


def build_queue(settings: Settings, namespace: str | None = None, *,
                lease_seconds: float | None = None) -> ReliablePriorityQueue:
    """The reliable priority queue on ``settings.redis_url``, classes from ``settings.priority_classes``."""
    return ReliablePriorityQueue(
        queue_client(settings), namespace_or_default(namespace),
        lease_seconds=settings.lease_seconds if lease_seconds is None else lease_seconds,
        classes=settings.priority_classes,
    )


def wake(settings: Settings, namespace: str | None = None) -> None:
    """Tell an idle dispatcher there is work or free capacity (it otherwise looks once a second)."""
    key = f"{namespace_or_default(namespace)}:wake"
    pipe = queue_client(settings).pipeline(transaction=False)
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
