"""The reliable priority queue against a real Redis: this test worker's spare database (each test keeps its
keys under a namespace of its own; one test flushes it, as Redis losing its data would)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from autooptimize.domain.fairness import FairScheduler, PriorityClass
from autooptimize.errors import InvalidArgument, ServiceUnavailable
from scheduler.dispatcher import Dispatcher
from tasks.rpq import Lease, QueueItem, ReliablePriorityQueue
from tests.helpers import spare_redis_url

REDIS_URL = spare_redis_url()
REPO = Path(__file__).resolve().parents[2]
CLASSES = ["urgent", "high", "normal", "low"]


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(REDIS_URL)
    try:
        conn.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable: {exc}")
    yield conn
    conn.close()


@pytest.fixture
def namespace(client: redis.Redis) -> Iterator[str]:
    ns = f"test:rpq:{uuid.uuid4().hex[:8]}"
    yield ns
    ReliablePriorityQueue(client, ns).clear()


def make_queue(client: redis.Redis, ns: str, lease: float = 30.0, **kwargs: object) -> ReliablePriorityQueue:
    return ReliablePriorityQueue(client, ns, lease_seconds=lease, classes=CLASSES, **kwargs)  # type: ignore[arg-type]


def item(table: str = "db.t", partition: str = "p=1", kind: str = "merge", cls: str = "normal", **kw: object) -> QueueItem:
    return QueueItem(f"act-{uuid.uuid4().hex[:6]}", table, partition, kind, cls, **kw)  # type: ignore[arg-type]


def test_enqueue_is_idempotent_per_table_partition_kind(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    first = item(priority=5)
    assert queue.enqueue(first) is True
    assert queue.enqueue(item(priority=7)) is False  # same key, worse priority: unchanged
    assert queue.enqueue(item(kind="sort")) is True
    assert queue.enqueue(item(partition="p=2")) is True
    assert queue.backlog() == {"normal": {"db.t": 3}}
    assert queue.enqueue(item(priority=1)) is False  # same key, better priority: promoted in place
    assert queue.enqueue(item(cls="high", priority=9)) is False  # more urgent class: moved
    assert queue.backlog() == {"high": {"db.t": 1}, "normal": {"db.t": 2}}
    lease = queue.dequeue("high", "db.t")
    assert lease is not None
    assert (lease.item.action_id, lease.item.priority_class, lease.item.priority) == (first.action_id, "high", 9)
    assert queue.enqueue(item()) is False  # leased: the running action covers it
    assert queue.backlog() == {"normal": {"db.t": 2}}


def test_dequeue_orders_by_priority_then_age_and_aging_lets_old_items_through(
    client: redis.Redis, namespace: str
) -> None:
    queue = make_queue(client, namespace, priority_step=60)
    now = time.time()
    queue.enqueue(item(partition="old-low", priority=2, enqueued_at=now - 500))  # score now - 380
    queue.enqueue(item(partition="new-high", priority=0, enqueued_at=now))  # score now
    queue.enqueue(item(partition="new-low", priority=2, enqueued_at=now - 10))  # score now + 110
    queue.enqueue(item(partition="mid", priority=1, enqueued_at=now - 30))  # score now + 30
    order = []
    while (lease := queue.dequeue("normal", "db.t")) is not None:
        order.append(lease.item.partition)
    assert order == ["old-low", "new-high", "mid", "new-low"]
    assert queue.dequeue("normal", "db.other") is None


def test_ack_removes_every_trace_and_a_second_ack_is_refused(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    queue.enqueue(item())
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None and lease.deliveries == 1
    assert queue.in_flight("db.t") == 1 and queue.in_flight() == 1
    assert Lease.from_json(lease.to_json()) == lease
    assert queue.ack(Lease.from_json(lease.to_json())) is True  # as an actor in another process would
    assert queue.ack(lease) is False
    assert queue.nack(lease) is False
    assert queue.extend(lease) is None
    assert queue.in_flight("db.t") == 0
    assert list(client.scan_iter(match=f"{namespace}:*")) == []


def test_expired_lease_puts_the_item_back_and_the_stale_lease_is_dead(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace, lease=0.2)
    original = item()
    queue.enqueue(original)
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None
    assert queue.reclaim_expired() == 0
    time.sleep(0.3)
    assert queue.reclaim_expired() == 1
    assert queue.in_flight("db.t") == 0
    again = queue.dequeue("normal", "db.t")
    assert again is not None
    assert again.item == lease.item and again.deliveries == 2 and again.token != lease.token
    assert queue.ack(lease) is False  # the first consumer lost it
    assert queue.ack(again) is True


def test_extend_keeps_a_lease_alive_past_its_first_expiry(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace, lease=0.3)
    queue.enqueue(item())
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None
    time.sleep(0.15)
    extended = queue.extend(lease, seconds=1.0)
    assert extended is not None and extended.expires_at > lease.expires_at + 0.5
    time.sleep(0.3)
    assert queue.reclaim_expired() == 0
    assert queue.ack(extended) is True


def test_nack_returns_the_item_now_or_after_a_delay(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    queue.enqueue(item())
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None and queue.nack(lease) is True
    assert queue.backlog() == {"normal": {"db.t": 1}}
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None and queue.nack(lease, delay=0.2) is True
    assert queue.backlog() == {} and queue.delayed() == 1 and queue.in_flight() == 0
    assert queue.enqueue(item()) is False  # still held while delayed
    assert queue.reclaim_expired() == 0
    time.sleep(0.25)
    assert queue.reclaim_expired() == 1
    lease = queue.dequeue("normal", "db.t")
    assert lease is not None and lease.deliveries == 3
    with pytest.raises(InvalidArgument, match="delay"):
        queue.nack(lease, delay=-1)


def test_capacity_limits_are_checked_atomically_with_the_lease(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    for p in range(3):
        queue.enqueue(item(table="db.a", partition=str(p)))
        queue.enqueue(item(table="db.b", partition=str(p)))
    a1 = queue.dequeue("normal", "db.a", per_table_limit=1)
    assert a1 is not None
    assert queue.dequeue("normal", "db.a", per_table_limit=1) is None
    assert queue.dequeue("normal", "db.b", per_table_limit=1, slots=2) is not None
    assert queue.dequeue("normal", "db.b", per_table_limit=5, slots=2) is None  # both slots taken
    queue.ack(a1)
    assert queue.dequeue("normal", "db.a", per_table_limit=1, slots=2) is not None
    assert queue.snapshot().in_flight == {"db.a": 1, "db.b": 1}


def test_two_items_of_one_partition_are_never_leased_at_once(client: redis.Redis, namespace: str) -> None:
    """A merge and a sort of one partition would each find the other's inputs gone at commit: the queue
    leases an item only while its partition has no lease (any kind), and serves the table's next
    partition meanwhile."""
    queue = make_queue(client, namespace)
    merge_p1 = item(partition="p|1", kind="merge", enqueued_at=time.time() - 30)  # a '|' in the partition too
    sort_p1 = item(partition="p|1", kind="sort", enqueued_at=time.time() - 20)
    merge_p2 = item(partition="p|2", kind="merge", enqueued_at=time.time() - 10)
    for it in (merge_p1, sort_p1, merge_p2):
        queue.enqueue(it)
    first = queue.dequeue("normal", "db.t", per_table_limit=3)
    assert first is not None and first.item.key == merge_p1.key
    assert queue.snapshot().busy == frozenset()  # p|2 is free
    second = queue.dequeue("normal", "db.t", per_table_limit=3)
    assert second is not None and second.item.key == merge_p2.key  # the sort of p|1 waits, p|2 goes ahead
    assert queue.snapshot().busy == {("normal", "db.t")}
    assert queue.dequeue("normal", "db.t", per_table_limit=3) is None
    assert queue.nack(first)  # back in its queue: the partition is free again, and the merge leads
    assert queue.snapshot().busy == frozenset()
    again = queue.dequeue("normal", "db.t", per_table_limit=3)
    assert again is not None and again.item.key == merge_p1.key
    assert queue.ack(again) and queue.ack(second)
    last = queue.dequeue("normal", "db.t", per_table_limit=3)
    assert last is not None and last.item.key == sort_p1.key
    assert queue.snapshot().in_flight == {"db.t": 1}


def test_dispatcher_serves_other_tables_while_a_table_waits_on_a_busy_partition(
        client: redis.Redis, namespace: str) -> None:
    """A queue whose items all wait on a leased partition is blocked in the snapshot, so the dispatcher
    picks another table instead of idling on it."""
    queue = make_queue(client, namespace)
    queue.enqueue(item(table="db.a", partition="p=1", kind="merge", enqueued_at=time.time() - 30))
    queue.enqueue(item(table="db.a", partition="p=1", kind="sort", enqueued_at=time.time() - 20))
    queue.enqueue(item(table="db.b", partition="p=1", kind="merge", enqueued_at=time.time() - 10))
    sent: list[Lease] = []
    dispatcher = Dispatcher(queue, FairScheduler([PriorityClass(c) for c in CLASSES]), sent.append, slots=4,
                            per_table=2)
    leases = dispatcher.run_once()
    assert sorted((lease.item.table, lease.item.kind) for lease in leases) == [("db.a", "merge"), ("db.b", "merge")]
    assert queue.snapshot().busy == {("normal", "db.a")}
    assert dispatcher.run_once() == []  # the sort waits: same partition, even with a slot free on db.a
    a_merge = next(lease for lease in leases if lease.item.table == "db.a")
    assert queue.ack(a_merge)
    assert [(lease.item.table, lease.item.kind) for lease in dispatcher.run_once()] == [("db.a", "sort")]


def test_rebuild_after_redis_loses_its_data(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    t0 = time.time() - 100
    pending = [item(table=f"db.t{i % 4}", partition=str(i), enqueued_at=t0 + i) for i in range(40)]
    assert queue.enqueue_many(pending) == 40
    leased = queue.dequeue("normal", "db.t0")
    assert leased is not None
    client.flushdb()  # Redis lost everything; PostgreSQL still lists the 40 unfinished actions
    assert queue.backlog() == {}
    result = queue.rebuild(pending)
    assert (result.added, result.removed) == (40, 0)
    assert queue.rebuild(pending).added == 0  # idempotent
    assert queue.backlog() == {"normal": {f"db.t{i}": 10 for i in range(4)}}
    first = queue.dequeue("normal", "db.t0")
    assert first is not None and first.item == pending[0]  # original ages kept
    # PostgreSQL no longer lists partitions 1..9 of db.t1 (e.g. cancelled): prune drops them
    keep = [p for p in pending if not (p.table == "db.t1" and p.partition != "1")] + [first.item]
    result = queue.rebuild(keep, prune=True)
    assert (result.added, result.removed) == (0, 9)
    assert queue.backlog()["normal"]["db.t1"] == 1
    assert queue.in_flight("db.t0") == 1  # the leased item was left to finish


CONSUMER = textwrap.dedent(
    """
    import sys, time, redis
    from tasks.rpq import ReliablePriorityQueue
    queue = ReliablePriorityQueue(redis.Redis.from_url(sys.argv[1]), sys.argv[2], lease_seconds=1.0)
    lease = queue.dequeue("normal", "db.t")
    print(lease.item.action_id if lease else "none", flush=True)
    time.sleep(60)  # "working"; killed before it can ack
    """
)


def test_item_of_a_killed_consumer_is_redelivered_after_its_lease(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace, lease=1.0)
    original = item()
    queue.enqueue(original)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, REDIS_URL, namespace], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == original.action_id
        consumer.send_signal(signal.SIGKILL)
        assert consumer.wait(timeout=10) == -signal.SIGKILL
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
        if consumer.stdout is not None:
            consumer.stdout.close()
    killed_at = time.time()
    assert queue.dequeue("normal", "db.t") is None  # still leased to the dead consumer
    assert queue.in_flight("db.t") == 1
    redelivered: Lease | None = None
    while redelivered is None and time.time() - killed_at < 5:
        queue.reclaim_expired()
        redelivered = queue.dequeue("normal", "db.t")
        time.sleep(0.05)
    assert redelivered is not None
    assert redelivered.item.action_id == original.action_id and redelivered.deliveries == 2
    assert time.time() - killed_at <= 1.5
    assert queue.ack(redelivered)


def test_dispatcher_shares_by_weight_and_respects_capacity(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    classes = [PriorityClass("urgent", urgent=True), PriorityClass("high", 6), PriorityClass("normal", 3), PriorityClass("low", 1)]
    tables = {f"db.t{i}": ["high", "normal", "low"][i % 3] for i in range(9)}
    queue.enqueue_many(item(table=t, partition=str(p), cls=c) for t, c in tables.items() for p in range(200))
    running: list[Lease] = []
    peak_per_table: Counter[str] = Counter()

    def submit(lease: Lease) -> None:
        running.append(lease)
        in_table = sum(1 for r in running if r.item.table == lease.item.table)
        peak_per_table[lease.item.table] = max(peak_per_table[lease.item.table], in_table)
        assert len(running) <= 4

    dispatcher = Dispatcher(queue, FairScheduler(classes), submit, slots=4, per_table=2)
    served: Counter[str] = Counter()
    for _ in range(500):  # actors finish in the order they started
        leases = dispatcher.run_once()
        assert queue.in_flight() == len(running) <= 4
        if running:
            done = running.pop(0)
            assert queue.ack(done)
            served[done.item.priority_class] += 1
        assert leases or running
    total = sum(served.values())
    assert total == 500
    for cls, weight in (("high", 6), ("normal", 3), ("low", 1)):
        assert served[cls] / total == pytest.approx(weight / 10, rel=0.1)
    assert max(peak_per_table.values()) <= 2


def test_concurrent_consumers_never_share_an_item(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    queue.enqueue_many(item(table=f"db.t{i % 3}", partition=str(i)) for i in range(300))
    acked: list[str] = []
    lock = threading.Lock()

    def consume() -> None:
        own = make_queue(client, namespace)
        while True:
            got = False
            for t in range(3):
                lease = own.dequeue("normal", f"db.t{t}")
                if lease is not None:
                    got = True
                    assert own.ack(lease)
                    with lock:
                        acked.append(lease.item.action_id)
            if not got:
                return

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(acked) == len(set(acked)) == 300


def test_run_forever_drains_the_queue_and_stops(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    queue.enqueue_many(item(table=f"db.t{i % 5}", partition=str(i), cls=["high", "low"][i % 2]) for i in range(50))
    done: list[str] = []

    def submit(lease: Lease) -> None:  # an actor that finishes at once
        done.append(lease.item.action_id)
        queue.ack(lease)

    classes = [PriorityClass("high", 3), PriorityClass("low", 1)]
    dispatcher = Dispatcher(queue, FairScheduler(classes, max_wait=5.0, clock=time.monotonic), submit, slots=2)
    stop = threading.Event()
    runner = threading.Thread(target=dispatcher.run_forever, args=(stop, 0.01))
    runner.start()
    deadline = time.time() + 10
    while len(done) < 50 and time.time() < deadline:
        time.sleep(0.02)
    stop.set()
    runner.join(timeout=5)
    assert not runner.is_alive()
    assert len(done) == 50 and queue.backlog() == {} and queue.in_flight() == 0


def test_dispatcher_puts_the_item_back_when_submit_fails(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    queue.enqueue(item())

    def submit(lease: Lease) -> None:
        raise RuntimeError("broker down")

    dispatcher = Dispatcher(queue, FairScheduler([PriorityClass("normal")]), submit, slots=1)
    with pytest.raises(RuntimeError, match="broker down"):
        dispatcher.dispatch_once()
    assert queue.backlog() == {"normal": {"db.t": 1}} and queue.in_flight() == 0


def test_bad_inputs_and_a_lost_redis_are_named(client: redis.Redis, namespace: str) -> None:
    queue = make_queue(client, namespace)
    with pytest.raises(InvalidArgument, match="unknown priority class 'vip'"):
        queue.enqueue(item(cls="vip"))
    with pytest.raises(InvalidArgument, match="table must not contain"):
        item(table="a|b")
    with pytest.raises(InvalidArgument, match="priority"):
        item(priority=-1)
    with pytest.raises(InvalidArgument, match="cost"):
        item(cost="big")
    with pytest.raises(InvalidArgument, match="slots"):
        Dispatcher(queue, FairScheduler([PriorityClass("normal")]), lambda lease: None, slots=0)
    assert item(partition="a|b").key == "db.t|a|b|merge"  # partitions may hold '|'
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    dead = ReliablePriorityQueue(unreachable, namespace)
    with pytest.raises(ServiceUnavailable, match="Redis"):
        dead.enqueue(item())
