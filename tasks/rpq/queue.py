"""The Reliable Priority Queue on Redis sorted sets.

A dequeued item is *leased*, not removed: it stays in Redis until its consumer acknowledges it, and
comes back to its queue when the lease expires (the consumer died) or is nacked. Enqueue is idempotent
per item key ``table|partition|kind``: a repeated decision never adds a second item. PostgreSQL's
actions table remains the source of truth; after Redis loses its data, :meth:`ReliablePriorityQueue.rebuild`
re-enqueues what the caller loaded from it. The Redis layout is described in :mod:`tasks.rpq.lua`.
"""

from __future__ import annotations

import functools
import math
import operator
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, ParamSpec, TypeVar

import redis

from autooptimize.errors import InvalidArgument, ServiceUnavailable
from tasks.rpq import lua
from tasks.rpq.item import Backlog, QueueItem, RebuildResult
from tasks.rpq.lease import Lease

P = ParamSpec("P")
R = TypeVar("R")

#: How many of a (class, table) queue's first items a dequeue looks through for one whose partition has no
#: lease (items of a leased partition wait; beyond this many the queue counts as busy until one ends).
PARTITION_WINDOW = 32


def _unavailable(method: Callable[P, R]) -> Callable[P, R]:
    """Map a lost Redis connection to :class:`ServiceUnavailable`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise ServiceUnavailable(f"Redis is unreachable: {exc}") from exc

    return wrapper


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse_meta(meta: Any) -> tuple[int, int, float, str, str]:
    rank, priority, cost, cls, table = _str(meta).split("|", 4)
    return int(rank), int(priority), float(cost), cls, table


class ReliablePriorityQueue:
    """Leased, idempotent, per-(class, table) priority queues in Redis.

    Safe to share between threads and processes: every state change is one Lua script. ``classes``,
    when given, lists the priority classes from most to least urgent: enqueue then rejects unknown
    classes, and a repeated enqueue may move a queued item to a more urgent class.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str = "ao:rpq",
        *,
        lease_seconds: float = 300.0,
        priority_step: float = 300.0,
        classes: Iterable[str] | None = None,
    ) -> None:
        if not namespace:
            raise InvalidArgument("namespace must be a non-empty string such as 'ao:rpq'")
        if not (math.isfinite(lease_seconds) and lease_seconds >= 0.001):
            raise InvalidArgument(f"lease_seconds must be at least 0.001, got {lease_seconds!r}")
        if not (math.isfinite(priority_step) and priority_step >= 0):
            raise InvalidArgument(f"priority_step must be a non-negative number of seconds, got {priority_step!r}")
        self._redis = redis_client
        self._ns = namespace
        self._lease_ms = round(lease_seconds * 1000)
        self._step = float(priority_step)
        self._rank: dict[str, int] | None = None
        if classes is not None:
            self._rank = {name: i for i, name in enumerate(classes)}
            if not self._rank:
                raise InvalidArgument("classes, when given, must name at least one priority class")
        register = redis_client.register_script
        self._enqueue = register(lua.ENQUEUE)
        self._dequeue = register(lua.DEQUEUE)
        self._ack = register(lua.ACK)
        self._nack = register(lua.NACK)
        self._extend = register(lua.EXTEND)
        self._reclaim = register(lua.RECLAIM)
        self._remove = register(lua.REMOVE)
        self._snapshot = register(lua.SNAPSHOT)

    @property
    def namespace(self) -> str:
        return self._ns

    @property
    def lease_seconds(self) -> float:
        return self._lease_ms / 1000

    def _enqueue_args(self, item: QueueItem, now: float) -> list[Any]:
        if self._rank is not None and item.priority_class not in self._rank:
            raise InvalidArgument(
                f"unknown priority class {item.priority_class!r}; known: {list(self._rank)}"
            )
        if item.enqueued_at is None:
            item = replace(item, enqueued_at=now)
        assert item.enqueued_at is not None
        rank = 0 if self._rank is None else self._rank[item.priority_class]
        score = item.enqueued_at + item.priority * self._step
        return [
            self._ns, item.key, item.to_json(), rank, item.priority, repr(item.cost),
            item.priority_class, item.table, repr(score), repr(self._step),
        ]

    @_unavailable
    def enqueue(self, item: QueueItem) -> bool:
        """Add ``item``; True when it is new.

        False when an item with the same key is already held: if queued, it keeps its action id and
        age and takes the better of the two priorities (and the more urgent class, when ``classes``
        was given); if leased or delayed it is left as it is (the running action covers the decision).
        """
        return bool(self._enqueue(args=self._enqueue_args(item, time.time())))

    @_unavailable
    def enqueue_many(self, items: Iterable[QueueItem], *, batch: int = 500) -> int:
        """Enqueue in pipelined batches; returns how many were new. Each item is atomic on its own."""
        if operator.index(batch) < 1:
            raise InvalidArgument(f"batch must be a positive integer, got {batch!r}")
        added = 0
        pending: list[QueueItem] = []

        def flush() -> int:
            pipe = self._redis.pipeline(transaction=False)
            now = time.time()
            for item in pending:
                self._enqueue(args=self._enqueue_args(item, now), client=pipe)
            result = sum(int(x) for x in pipe.execute())
            pending.clear()
            return result

        for item in items:
            pending.append(item)
            if len(pending) >= batch:
                added += flush()
        if pending:
            added += flush()
        return added

    @_unavailable
    def rebuild(self, items: Iterable[QueueItem], *, prune: bool = False) -> RebuildResult:
        """Re-enqueue the actions PostgreSQL says are pending (idempotent), e.g. after Redis lost its data.

        Pass every action not yet finished, running ones included: a running action whose lease was lost
        with Redis is queued again, and the exactly-once commit makes a second run harmless. With
        ``prune``, queued or delayed items whose key is not among ``items`` are removed (leased ones are
        left to finish).
        """
        items = list(items)
        added = self.enqueue_many(items)
        removed = 0
        if prune:
            wanted = {item.key for item in items}
            for key in self._redis.hkeys(f"{self._ns}:item"):
                if _str(key) not in wanted and self.remove(_str(key)):
                    removed += 1
        return RebuildResult(added=added, removed=removed)

    @_unavailable
    def dequeue(
        self, priority_class: str, table: str, *, per_table_limit: int = 0, slots: int = 0
    ) -> Lease | None:
        """Lease the first item of the (class, table) queue whose partition has no lease; None when the
        queue is empty, capacity is used up, or the partition of each of its first
        :data:`PARTITION_WINDOW` items has a lease (two actions never run on one partition at once,
        whatever their kinds: one would find the other's inputs gone at its commit).

        ``per_table_limit`` (0: none) refuses when the table already has that many leases; ``slots``
        (0: none) refuses when that many items are leased in total. The check and the lease are atomic.
        """
        token = uuid.uuid4().hex
        reply = self._dequeue(
            args=[self._ns, priority_class, table, token, self._lease_ms, int(per_table_limit), int(slots),
                  PARTITION_WINDOW]
        )
        if _str(reply[0]) != "ok":
            return None
        _, _, payload, meta, expires, deliveries = reply
        _, priority, _, cls, _ = _parse_meta(meta)
        item = replace(QueueItem.from_json(payload), priority_class=cls, priority=priority)
        return Lease(item=item, token=token, expires_at=int(expires) / 1000, deliveries=int(deliveries))

    @_unavailable
    def ack(self, lease: Lease) -> bool:
        """Finish the item: it is gone. False when the lease was lost (reclaimed; maybe leased again)."""
        return bool(self._ack(args=[self._ns, lease.item.key, lease.token]))

    @_unavailable
    def nack(self, lease: Lease, delay: float = 0.0) -> bool:
        """Give the item back: into its queue now, or after ``delay`` seconds. False when the lease was lost."""
        if not (math.isfinite(delay) and delay >= 0):
            raise InvalidArgument(f"delay must be a non-negative number of seconds, got {delay!r}")
        return bool(self._nack(args=[self._ns, lease.item.key, lease.token, round(delay * 1000)]))

    @_unavailable
    def extend(self, lease: Lease, seconds: float | None = None) -> Lease | None:
        """Renew the lease for ``seconds`` (default: lease_seconds) from now; None when it was lost.

        A lease that expired but has not been reclaimed yet can still be extended or acked.
        """
        ms = self._lease_ms if seconds is None else round(seconds * 1000)
        if ms < 1:
            raise InvalidArgument(f"seconds must be at least 0.001, got {seconds!r}")
        expires = int(self._extend(args=[self._ns, lease.item.key, lease.token, ms]))
        return replace(lease, expires_at=expires / 1000) if expires else None

    @_unavailable
    def reclaim_expired(self, limit: int = 1000) -> int:
        """Put items whose lease expired, and nacked items whose delay is over, back; returns how many."""
        return int(self._reclaim(args=[self._ns, int(limit)]))

    @_unavailable
    def holds(self, key: str) -> bool:
        """Whether an item with ``key`` is queued, leased or delayed here."""
        return bool(self._redis.hexists(f"{self._ns}:item", key))

    @_unavailable
    def remove(self, key: str) -> bool:
        """Drop a queued or delayed item by key (e.g. its action was cancelled); leased items are kept."""
        return int(self._remove(args=[self._ns, key])) == 1

    @_unavailable
    def snapshot(self) -> Backlog:
        """Queued counts and next costs per (class, table), the queues whose partitions are all busy,
        leases per table, total leases: one atomic read."""
        queues_raw, inflight_raw, leased = self._snapshot(args=[self._ns, PARTITION_WINDOW])
        queues: dict[tuple[str, str], tuple[int, float]] = {}
        busy: set[tuple[str, str]] = set()
        for line in filter(None, _str(queues_raw).split("\n")):
            qname, count, cost, blocked = line.split("\t")
            cls, table = qname.split("|", 1)
            queues[(cls, table)] = (int(count), float(cost))
            if blocked == "1":
                busy.add((cls, table))
        in_flight: dict[str, int] = {}
        for line in filter(None, _str(inflight_raw).split("\n")):
            table, leases = line.split("\t")
            in_flight[table] = int(leases)
        return Backlog(queues=queues, in_flight=in_flight, leased=int(leased), busy=frozenset(busy))

    def backlog(self) -> dict[str, dict[str, int]]:
        """Queued (not leased, not delayed) items per class, then per table."""
        return self.snapshot().counts()

    @_unavailable
    def in_flight(self, table: str | None = None) -> int:
        """Leased items of ``table``, or of all tables when None."""
        if table is None:
            return int(self._redis.zcard(f"{self._ns}:lease"))
        return int(self._redis.hget(f"{self._ns}:inflight", table) or 0)

    @_unavailable
    def delayed(self) -> int:
        """Nacked items waiting for their delay to pass."""
        return int(self._redis.zcard(f"{self._ns}:delayed"))

    @_unavailable
    def clear(self) -> None:
        """Delete every key of this namespace (tests, and a deliberate rebuild from PostgreSQL)."""
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self._ns) + ":*"
        keys = list(self._redis.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 500):
            self._redis.delete(*keys[start:start + 500])
