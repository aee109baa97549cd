"""Dispatch through the reliable priority queue (AO_DISPATCH=rpq) with a real Redis, PostgreSQL, Spark
Connect server and Celery worker: delivery and ack, redelivery after a killed consumer (committed once),
and a Redis flush mid-run rebuilt from PostgreSQL."""

from __future__ import annotations

import os
import queue as queue_module
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import tasks.rpq as rpq_module
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit_events
from scheduler.dispatcher import run_dispatcher
from tasks.rpq import Lease, LeaseTicket, build_queue
from tasks.send import CeleryDispatch, send_leased_action
from tests.integration.tables import DAY1, DAY2, identifier, make_table

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 9  # the dispatcher's lease term in these tests; actors extend it every 3 s


def _wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def worker(settings, spark_server) -> Iterator[str]:
    """One real actor worker (``autooptimize worker``, AO_DISPATCH=rpq) on the actor queues."""
    from tasks.app import app

    name = f"dispatchtest-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    queues = ",".join(f"ao.actor.{c}" for c in settings.priority_classes)
    log = tempfile.NamedTemporaryFile(prefix="ao-dispatch-worker-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autooptimize.cli", "worker", "--queues", queues, "--concurrency", "1",
         "--name", name, "--loglevel", "INFO"],
        env={**os.environ, "AO_DISPATCH": "rpq"}, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[name], timeout=1.0):
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "worker not ready: " + Path(log.name).read_text()[-3000:]
        yield name
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


@pytest.fixture
def rpq(settings, monkeypatch) -> Iterator[tuple[object, str]]:
    """Settings with AO_DISPATCH=rpq and a short lease, and a namespace of this test's own."""
    ns = f"test:dispatch:{uuid.uuid4().hex[:8]}"
    # Rebuild re-enqueues every pending action in PostgreSQL: close those other tests left pending.
    from sqlalchemy import text

    from autooptimize.storage.db import session_scope

    with session_scope(settings) as session:
        session.execute(text("UPDATE ao_actions SET state = 'failed', reason = 'test_isolation' "
                             "WHERE state IN ('queued', 'running')"))
    monkeypatch.setattr(rpq_module, "NAMESPACE", ns)  # where submit() enqueues
    variant = settings.model_copy(update={"dispatch": "rpq", "lease_seconds": LEASE_SECONDS})
    yield variant, ns
    build_queue(variant, ns).clear()


class DispatcherThread:
    """``run_dispatcher`` on a thread, recording every lease it hands to Celery."""

    def __init__(self, settings, ns: str) -> None:
        self.sent: list[tuple[float, Lease]] = []
        self.stop = threading.Event()

        def submit(lease: Lease) -> None:
            self.sent.append((time.time(), lease))
            send_leased_action(settings, LeaseTicket(lease, ns, settings.lease_seconds))

        self.thread = threading.Thread(
            target=run_dispatcher, args=(settings, self.stop),
            kwargs={"namespace": ns, "idle_seconds": 0.2, "submit": submit}, daemon=True,
        )

    def __enter__(self) -> DispatcherThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _track(settings, catalog, files: dict) -> tuple[object, str]:
    table = make_table(catalog, files)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return table, ident


def _commits_of(table, action_id: str) -> list[int]:
    table.refresh()
    return [s.snapshot_id for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _drained(queue, redis_url: str) -> bool:
    """Every item acked: nothing queued, leased or delayed, no payload left."""
    with redis.Redis.from_url(redis_url) as client:
        payloads = client.hlen(f"{queue.namespace}:item")
    return not queue.backlog() and queue.in_flight() == 0 and queue.delayed() == 0 and not payloads


def test_submitted_action_is_dispatched_run_by_a_worker_and_acked(settings, spark, catalog, worker, rpq):
    variant, ns = rpq
    # a lease long enough that a slow first start (a loaded CI machine) cannot expire it: one delivery
    variant = variant.model_copy(update={"lease_seconds": 120})
    table, ident = _track(settings, catalog, {DAY1: 4, DAY2: 2})
    action_id = actions.submit(variant, ident, partition="day=2026-01-01", dispatch=CeleryDispatch(variant))
    queue = build_queue(variant, ns)
    # recorded and queued (ad-hoc: one class above the table's "normal"), not sent to Celery
    assert queue.backlog() == {"high": {ident: 1}}

    with DispatcherThread(variant, ns) as dispatcher:
        out = actions.wait(settings, action_id, timeout=120)
        _wait_for(lambda: _drained(queue, variant.redis_url), 10, "the lease to be acked")

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (4, 1)
    assert [lease.deliveries for _, lease in dispatcher.sent if lease.item.action_id == action_id] == [1]
    assert _commits_of(table, action_id) == [out["snapshot_id"]]


CONSUMER = textwrap.dedent(
    """
    import sys, time
    from autooptimize.config import get_settings
    from autooptimize.services import actions
    from autooptimize.domain.actions import Hooks
    from tasks.rpq import LeaseKeeper, build_queue

    settings = get_settings()
    queue = build_queue(settings, sys.argv[1], lease_seconds=2.0)
    lease = queue.dequeue("normal", sys.argv[2])
    print("leased", lease.item.action_id, lease.deliveries, flush=True)

    def hang(snapshot_id):
        print("committed", snapshot_id, flush=True)
        time.sleep(600)  # killed here: committed to the table, not recorded, never acked

    with LeaseKeeper(queue, lease, seconds=2.0, interval=0.5):
        actions.execute(settings, lease.item.action_id, hooks=Hooks(after_commit=hang))
    """
)


def _lines(proc: subprocess.Popen) -> queue_module.Queue:
    lines: queue_module.Queue = queue_module.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _expect(lines: queue_module.Queue, prefix: str, timeout: float, proc: subprocess.Popen) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue_module.Empty:
            assert proc.poll() is None, f"consumer exited with {proc.returncode} before {prefix!r}"
            continue
        if line.startswith(prefix):
            return line.split()
    raise AssertionError(f"consumer did not print {prefix!r} within {timeout} s")


def test_item_of_a_killed_consumer_is_redelivered_and_committed_once(settings, spark, catalog, worker, rpq):
    variant, ns = rpq
    table, ident = _track(settings, catalog, {DAY1: 4})
    action_id = actions.submit(variant, ident, partition="day=2026-01-01", priority="normal", dispatch=CeleryDispatch(variant))
    queue = build_queue(variant, ns)

    consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, ns, ident], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=dict(os.environ), cwd=REPO)
    try:
        lines = _lines(consumer)
        assert _expect(lines, "leased", 30, consumer)[1:] == [action_id, "1"]
        committed = int(_expect(lines, "committed", 90, consumer)[1])
        consumer.send_signal(signal.SIGKILL)
        assert consumer.wait(timeout=10) == -signal.SIGKILL
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    killed_at = time.time()
    assert actions.get_outcome(settings, action_id)["state"] == "running"
    assert _commits_of(table, action_id) == [committed]
    assert queue.in_flight(ident) == 1  # still leased to the dead consumer

    with DispatcherThread(variant, ns) as dispatcher:
        out = actions.wait(settings, action_id, timeout=90)
        _wait_for(lambda: _drained(queue, variant.redis_url), 10, "the lease to be acked")

    assert [(lease.item.action_id, lease.deliveries) for _, lease in dispatcher.sent] == [(action_id, 2)]
    assert dispatcher.sent[0][0] - killed_at <= 2.0 + 1.5  # back once the 2 s lease ran out
    assert (out["state"], out["reason"], out["snapshot_id"]) == ("succeeded", "already_committed", committed)
    assert _commits_of(table, action_id) == [committed]  # exactly once
    with session_scope(settings) as s:
        events = [e.event for e in audit_events(s, action_id)]
    assert events.count("action.started") == 2 and events[-1] == "action.succeeded"


def test_redis_flushed_mid_run_is_rebuilt_from_postgres_and_nothing_is_lost(settings, spark, catalog, worker, rpq):
    variant, ns = rpq
    variant = variant.model_copy(update={"dispatch_slots": 1})
    tables = [_track(settings, catalog, {DAY1: 3, DAY2: 3}), _track(settings, catalog, {DAY1: 3})]
    submitted = [
        (tables[0][0], actions.submit(variant, tables[0][1], partition="day=2026-01-01", dispatch=CeleryDispatch(variant))),
        (tables[0][0], actions.submit(variant, tables[0][1], partition="day=2026-01-02", dispatch=CeleryDispatch(variant))),
        (tables[1][0], actions.submit(variant, tables[1][1], partition="day=2026-01-01", dispatch=CeleryDispatch(variant))),
    ]
    ids = [action_id for _, action_id in submitted]
    queue = build_queue(variant, ns)
    assert sum(n for per_table in queue.backlog().values() for n in per_table.values()) == 3

    def states() -> list[str]:
        return [actions.get_outcome(settings, a)["state"] for a in ids]

    with DispatcherThread(variant, ns) as dispatcher:
        _wait_for(lambda: "running" in states(), 60, "an action to start")
        assert states().count("queued") >= 1
        with redis.Redis.from_url(variant.redis_url) as client:
            client.flushdb()  # Redis loses the backlog, the lease and Celery's own keys
        _wait_for(lambda: queue.backlog() or queue.in_flight(), 10, "the backlog to be rebuilt")
        outcomes = [actions.wait(settings, a, timeout=120) for a in ids]
        _wait_for(lambda: _drained(queue, variant.redis_url), 20, "every lease to be acked")

    assert [o["state"] for o in outcomes] == ["succeeded"] * 3, outcomes
    for table, action_id in submitted:
        assert len(_commits_of(table, action_id)) == 1, action_id
    assert {lease.item.action_id for _, lease in dispatcher.sent} == set(ids)
