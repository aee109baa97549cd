"""Reliable Priority Queue on Redis sorted sets, and the dispatcher that drains it fairly.

A dequeued item is *leased*, not removed: it stays in Redis until its consumer acknowledges it, and
comes back to its queue when the lease expires (the consumer died) or is nacked. Enqueue is idempotent
per item key ``table|partition|kind``: a repeated decision never adds a second item. PostgreSQL's
actions table remains the source of truth; after Redis loses its data, :meth:`ReliablePriorityQueue.rebuild`
re-enqueues what the caller loaded from it.

Redis layout under the namespace ``ns`` (one Redis, not a cluster; every transition is one Lua script):

==========================  ====================================================================
``ns:q:{class}|{table}``    sorted set of queued item keys, scored by ``enqueued_at + priority x
                            priority_step`` (lowest first: a lower priority number is served earlier,
                            and an old item eventually overtakes newer higher-priority ones)
``ns:queues``               set of non-empty ``{class}|{table}`` queue names
``ns:item``                 hash: item key -> JSON payload (as first enqueued)
``ns:meta``                 hash: item key -> ``rank|priority|cost|class|table`` (current values)
``ns:score``                hash: item key -> score, to put a leased item back where it was
``ns:lease``                sorted set of leased item keys scored by lease expiry (ms, Redis clock)
``ns:token``                hash: item key -> token of its current lease
``ns:inflight``             hash: table -> number of leased items
``ns:delayed``              sorted set of nacked item keys scored by the time they may return (ms)
``ns:deliveries``           hash: item key -> times it has been leased
==========================  ====================================================================

Lease times use the Redis server clock, so consumers on different hosts agree on expiry.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import operator
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, ParamSpec, TypeVar

import redis

from autooptimize.domain.fairness import FairScheduler, Head
from autooptimize.errors import InvalidArgument, ServiceUnavailable

__all__ = [
    "Backlog",
    "Dispatcher",
    "Lease",
    "QueueItem",
    "RebuildResult",
    "ReliablePriorityQueue",
]

log = logging.getLogger(__name__)

MAX_PRIORITY = 1_000_000

P = ParamSpec("P")
R = TypeVar("R")


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


@dataclass(frozen=True)
class QueueItem:
    """One action waiting to run. ``key`` (table|partition|kind) identifies it in the queue.

    ``priority`` orders items of one (class, table) queue: 0 first; each step is worth
    ``priority_step`` seconds of waiting. ``cost`` is what fair sharing counts (1 per item, or bytes).
    ``enqueued_at`` (seconds since the epoch) is set on enqueue when None; keep the original time when
    rebuilding so items keep their place.
    """

    action_id: str
    table: str
    partition: str
    kind: str
    priority_class: str
    priority: int = 0
    cost: float = 1.0
    enqueued_at: float | None = None

    def __post_init__(self) -> None:
        for name in ("action_id", "table", "kind", "priority_class"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"QueueItem.{name} must be a non-empty string, got {value!r}")
        for name in ("table", "kind", "priority_class"):
            if any(c in getattr(self, name) for c in "|\t\n"):
                raise InvalidArgument(
                    f"QueueItem.{name} must not contain '|', a tab or a newline, got {getattr(self, name)!r}"
                )
        if not isinstance(self.partition, str):
            raise InvalidArgument(f"QueueItem.partition must be a string ('' when unpartitioned), got {self.partition!r}")
        try:
            priority = operator.index(self.priority)
        except TypeError:
            raise InvalidArgument(f"QueueItem.priority must be an integer, got {self.priority!r}") from None
        if not 0 <= priority <= MAX_PRIORITY:
            raise InvalidArgument(f"QueueItem.priority must be in 0..{MAX_PRIORITY}, got {self.priority!r}")
        try:
            cost = float(self.cost)
            enqueued_ok = self.enqueued_at is None or math.isfinite(float(self.enqueued_at))
        except (TypeError, ValueError):
            cost, enqueued_ok = math.nan, False
        if not math.isfinite(cost) or cost <= 0:
            raise InvalidArgument(f"QueueItem.cost must be a positive finite number, got {self.cost!r}")
        if not enqueued_ok:
            raise InvalidArgument(f"QueueItem.enqueued_at must be finite seconds or None, got {self.enqueued_at!r}")
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "cost", cost)

    @property
    def key(self) -> str:
        """Dedupe key ``table|partition|kind``; table and kind hold no '|', so it splits back uniquely."""
        return f"{self.table}|{self.partition}|{self.kind}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "action_id": self.action_id,
                "table": self.table,
                "partition": self.partition,
                "kind": self.kind,
                "priority_class": self.priority_class,
                "priority": self.priority,
                "cost": self.cost,
                "enqueued_at": self.enqueued_at,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, payload: str | bytes) -> QueueItem:
        data = json.loads(payload)
        return cls(**data)


@dataclass(frozen=True)
class Lease:
    """A dequeued item held by one consumer until ``expires_at`` (seconds, Redis clock).

    ``deliveries`` counts how many times the item has been leased, 1 on its first delivery.
    """

    item: QueueItem
    token: str
    expires_at: float
    deliveries: int

    def to_json(self) -> str:
        """A form to hand to the actor (e.g. as a Celery task argument) so that it can ack, nack or extend."""
        return json.dumps(
            {"item": json.loads(self.item.to_json()), "token": self.token,
             "expires_at": self.expires_at, "deliveries": self.deliveries},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, payload: str | bytes) -> Lease:
        data = json.loads(payload)
        return cls(QueueItem(**data["item"]), data["token"], float(data["expires_at"]), int(data["deliveries"]))


@dataclass(frozen=True)
class Backlog:
    """What the queue holds right now, from one atomic read.

    ``queues`` maps (class, table) to (queued items, cost of the head item); ``in_flight`` maps a table
    to its leased items; ``leased`` is the total number of leases.
    """

    queues: dict[tuple[str, str], tuple[int, float]]
    in_flight: dict[str, int]
    leased: int

    def counts(self) -> dict[str, dict[str, int]]:
        """Queued items per class, then per table."""
        out: dict[str, dict[str, int]] = {}
        for (cls, table), (count, _) in sorted(self.queues.items()):
            out.setdefault(cls, {})[table] = count
        return out


@dataclass(frozen=True)
class RebuildResult:
    added: int
    removed: int


_LUA_COMMON = """
local ns = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(meta)
  return string.match(meta, '^(%d+)|(%d+)|([^|]+)|([^|]+)|(.+)$')
end
local function queue_add(id, cls, tbl, score)
  local qname = cls .. '|' .. tbl
  redis.call('ZADD', ns .. ':q:' .. qname, score, id)
  redis.call('SADD', ns .. ':queues', qname)
end
local function queue_rem(id, cls, tbl)
  local qname = cls .. '|' .. tbl
  local qkey = ns .. ':q:' .. qname
  local n = redis.call('ZREM', qkey, id)
  if redis.call('ZCARD', qkey) == 0 then redis.call('SREM', ns .. ':queues', qname) end
  return n
end
local function requeue(id)
  local _, _, _, cls, tbl = parse(redis.call('HGET', ns .. ':meta', id))
  queue_add(id, cls, tbl, redis.call('HGET', ns .. ':score', id))
end
local function release(id)
  local _, _, _, _, tbl = parse(redis.call('HGET', ns .. ':meta', id))
  redis.call('ZREM', ns .. ':lease', id)
  redis.call('HDEL', ns .. ':token', id)
  if redis.call('HINCRBY', ns .. ':inflight', tbl, -1) <= 0 then redis.call('HDEL', ns .. ':inflight', tbl) end
end
local function forget(id)
  redis.call('HDEL', ns .. ':item', id)
  redis.call('HDEL', ns .. ':meta', id)
  redis.call('HDEL', ns .. ':score', id)
  redis.call('HDEL', ns .. ':deliveries', id)
end
local function holds(id, token)
  return redis.call('HGET', ns .. ':token', id) == token
end
"""

# ARGV: ns, id, payload, rank, priority, cost, class, table, score, priority_step
# Returns 1 when the item is new, 0 when it was already there (queued: promoted if the new one is better).
_LUA_ENQUEUE = _LUA_COMMON + """
local id, cls, tbl = ARGV[2], ARGV[7], ARGV[8]
local meta = redis.call('HGET', ns .. ':meta', id)
if not meta then
  redis.call('HSET', ns .. ':item', id, ARGV[3])
  redis.call('HSET', ns .. ':meta', id, ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6] .. '|' .. cls .. '|' .. tbl)
  redis.call('HSET', ns .. ':score', id, ARGV[9])
  queue_add(id, cls, tbl, ARGV[9])
  return 1
end
local orank, oprio, ocost, ocls, otbl = parse(meta)
local oscore = redis.call('ZSCORE', ns .. ':q:' .. ocls .. '|' .. otbl, id)
if not oscore then return 0 end
local rank, prio = tonumber(ARGV[4]), tonumber(ARGV[5])
orank, oprio = tonumber(orank), tonumber(oprio)
if not (rank < orank or (rank == orank and cls == ocls and prio < oprio)) then return 0 end
local score = tonumber(oscore) + (prio - oprio) * tonumber(ARGV[10])
queue_rem(id, ocls, otbl)
queue_add(id, cls, otbl, score)
redis.call('HSET', ns .. ':score', id, score)
redis.call('HSET', ns .. ':meta', id, ARGV[4] .. '|' .. ARGV[5] .. '|' .. ocost .. '|' .. cls .. '|' .. otbl)
return 0
"""

# ARGV: ns, class, table, token, lease_ms, per_table_limit (0: none), global_limit (0: none)
_LUA_DEQUEUE = _LUA_COMMON + """
local cls, tbl = ARGV[2], ARGV[3]
local per_table, slots = tonumber(ARGV[6]), tonumber(ARGV[7])
if per_table > 0 and tonumber(redis.call('HGET', ns .. ':inflight', tbl) or '0') >= per_table then
  return {'table_full'}
end
if slots > 0 and redis.call('ZCARD', ns .. ':lease') >= slots then return {'slots_full'} end
local ids = redis.call('ZRANGE', ns .. ':q:' .. cls .. '|' .. tbl, 0, 0)
if #ids == 0 then return {'empty'} end
local id = ids[1]
queue_rem(id, cls, tbl)
local expires = now_ms() + tonumber(ARGV[5])
redis.call('ZADD', ns .. ':lease', expires, id)
redis.call('HSET', ns .. ':token', id, ARGV[4])
redis.call('HINCRBY', ns .. ':inflight', tbl, 1)
local deliveries = redis.call('HINCRBY', ns .. ':deliveries', id, 1)
return {'ok', id, redis.call('HGET', ns .. ':item', id), redis.call('HGET', ns .. ':meta', id), expires, deliveries}
"""

# ARGV: ns, id, token
_LUA_ACK = _LUA_COMMON + """
local id = ARGV[2]
if not holds(id, ARGV[3]) then return 0 end
release(id)
forget(id)
return 1
"""

# ARGV: ns, id, token, delay_ms
_LUA_NACK = _LUA_COMMON + """
local id, delay = ARGV[2], tonumber(ARGV[4])
if not holds(id, ARGV[3]) then return 0 end
release(id)
if delay > 0 then
  redis.call('ZADD', ns .. ':delayed', now_ms() + delay, id)
else
  requeue(id)
end
return 1
"""

# ARGV: ns, id, token, lease_ms; returns the new expiry (ms) or 0 when the lease is lost
_LUA_EXTEND = _LUA_COMMON + """
local id = ARGV[2]
if not holds(id, ARGV[3]) then return 0 end
local expires = now_ms() + tonumber(ARGV[4])
redis.call('ZADD', ns .. ':lease', 'XX', expires, id)
return expires
"""

# ARGV: ns, limit; returns the number of items put back into their queues
_LUA_RECLAIM = _LUA_COMMON + """
local now, limit, n = now_ms(), tonumber(ARGV[2]), 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', ns .. ':lease', '-inf', now, 'LIMIT', 0, limit)) do
  release(id)
  requeue(id)
  n = n + 1
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', ns .. ':delayed', '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', ns .. ':delayed', id)
  requeue(id)
  n = n + 1
end
return n
"""

# ARGV: ns, id; 1 removed, 0 unknown, -1 leased (left alone)
_LUA_REMOVE = _LUA_COMMON + """
local id = ARGV[2]
local meta = redis.call('HGET', ns .. ':meta', id)
if not meta then return 0 end
if redis.call('HEXISTS', ns .. ':token', id) == 1 then return -1 end
local _, _, _, cls, tbl = parse(meta)
queue_rem(id, cls, tbl)
redis.call('ZREM', ns .. ':delayed', id)
forget(id)
return 1
"""

# ARGV: ns; returns {"qname\tcount\thead cost" lines, "table\tleases" lines, total leases}:
# flat strings, because parsing a reply of thousands of elements costs the client more than the script
_LUA_SNAPSHOT = _LUA_COMMON + """
local queues = {}
for _, qname in ipairs(redis.call('SMEMBERS', ns .. ':queues')) do
  local qkey = ns .. ':q:' .. qname
  local head = redis.call('ZRANGE', qkey, 0, 0)
  if #head > 0 then
    local _, _, cost = parse(redis.call('HGET', ns .. ':meta', head[1]))
    queues[#queues + 1] = qname .. '\\t' .. redis.call('ZCARD', qkey) .. '\\t' .. cost
  end
end
local inflight = redis.call('HGETALL', ns .. ':inflight')
local lines = {}
for i = 1, #inflight, 2 do lines[#lines + 1] = inflight[i] .. '\\t' .. inflight[i + 1] end
return {table.concat(queues, '\\n'), table.concat(lines, '\\n'), redis.call('ZCARD', ns .. ':lease')}
"""


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
        self._enqueue = register(_LUA_ENQUEUE)
        self._dequeue = register(_LUA_DEQUEUE)
        self._ack = register(_LUA_ACK)
        self._nack = register(_LUA_NACK)
        self._extend = register(_LUA_EXTEND)
        self._reclaim = register(_LUA_RECLAIM)
        self._remove = register(_LUA_REMOVE)
        self._snapshot = register(_LUA_SNAPSHOT)

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
        """Lease the head item of the (class, table) queue; None when it is empty or capacity is used up.

        ``per_table_limit`` (0: none) refuses when the table already has that many leases; ``slots``
        (0: none) refuses when that many items are leased in total. The check and the lease are atomic.
        """
        token = uuid.uuid4().hex
        reply = self._dequeue(
            args=[self._ns, priority_class, table, token, self._lease_ms, int(per_table_limit), int(slots)]
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
    def remove(self, key: str) -> bool:
        """Drop a queued or delayed item by key (e.g. its action was cancelled); leased items are kept."""
        return int(self._remove(args=[self._ns, key])) == 1

    @_unavailable
    def snapshot(self) -> Backlog:
        """Queued counts and head costs per (class, table), leases per table, total leases: one atomic read."""
        queues_raw, inflight_raw, leased = self._snapshot(args=[self._ns])
        queues: dict[tuple[str, str], tuple[int, float]] = {}
        for line in filter(None, _str(queues_raw).split("\n")):
            qname, count, cost = line.split("\t")
            cls, table = qname.split("|", 1)
            queues[(cls, table)] = (int(count), float(cost))
        in_flight: dict[str, int] = {}
        for line in filter(None, _str(inflight_raw).split("\n")):
            table, leases = line.split("\t")
            in_flight[table] = int(leases)
        return Backlog(queues=queues, in_flight=in_flight, leased=int(leased))

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


class Dispatcher:
    """Moves items from the queue to actors, fairly, and only while actors have capacity.

    Each dispatch: read the backlog, offer the scheduler every (class, table) queue, marked blocked when
    its table already has ``per_table`` leases, lease the head of the queue it picks, and hand the lease to
    ``submit`` (e.g. a function that sends the Celery task; the actor acks or nacks the lease, and
    extends it while it works). Nothing is dispatched while ``slots`` leases are out. One dispatcher
    should run per namespace (the scheduler's state is in memory); running two is safe, only less fair.
    """

    def __init__(
        self,
        queue: ReliablePriorityQueue,
        scheduler: FairScheduler,
        submit: Callable[[Lease], None],
        *,
        slots: int,
        per_table: int = 1,
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
        self._known = {c.name for c in scheduler.classes}
        self._warned: set[str] = set()

    def dispatch_once(self) -> Lease | None:
        """Dispatch at most one item; None when there is no capacity or nothing eligible.

        If ``submit`` raises, the item goes back to its queue at once and the error propagates.
        """
        backlog = self.queue.snapshot()
        if backlog.leased >= self.slots:
            return None
        heads = []
        for (cls, table), (_, cost) in backlog.queues.items():
            if cls not in self._known:
                if cls not in self._warned:
                    log.warning("queue holds items of priority class %r, which the scheduler does not know", cls)
                    self._warned.add(cls)
                continue
            heads.append(Head(cls, table, cost, blocked=backlog.in_flight.get(table, 0) >= self.per_table))
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
        return lease

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
