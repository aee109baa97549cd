"""One dispatcher per queue namespace works, the others stand by and take over (PostgreSQL lock)."""

from __future__ import annotations

import threading
import time
import uuid

from scheduler.dispatcher import run_dispatcher
from scheduler.listener import Leadership
from tasks.rpq import Lease, QueueItem, build_queue


def test_a_role_is_held_by_one_process_and_passes_on_when_released(settings):
    first, second = Leadership(settings, "dispatcher:t1"), Leadership(settings, "dispatcher:t1")
    other = Leadership(settings, "dispatcher:t2")
    try:
        assert first.hold() and first.hold()  # held, and still held
        assert not second.hold()
        assert other.hold()  # another namespace is another role
        first.release()
        assert second.hold()
    finally:
        for lead in (first, second, other):
            lead.release()


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_standby_dispatcher_sends_nothing_until_the_active_one_stops(settings):
    ns = f"ao-lead-{uuid.uuid4().hex[:6]}"
    queue = build_queue(settings, ns)
    sent: dict[str, list[str]] = {"a": [], "b": []}

    def submitter(name):
        def submit(lease: Lease) -> None:
            sent[name].append(lease.item.action_id)
            queue.ack(lease)
        return submit

    stop_a, stop_b = threading.Event(), threading.Event()
    a = threading.Thread(target=run_dispatcher, args=(settings, stop_a),
                         kwargs={"namespace": ns, "submit": submitter("a"), "idle_seconds": 0.2}, daemon=True)
    b = threading.Thread(target=run_dispatcher, args=(settings, stop_b),
                         kwargs={"namespace": ns, "submit": submitter("b"), "idle_seconds": 0.2}, daemon=True)
    try:
        a.start()
        queue.enqueue(QueueItem("act-1", "db.t", "p=1", "merge", settings.priority_classes[-1]))
        _wait(lambda: "act-1" in sent["a"], timeout=60)
        b.start()
        time.sleep(1.5)
        queue.enqueue(QueueItem("act-2", "db.t", "p=2", "merge", settings.priority_classes[-1]))
        _wait(lambda: "act-2" in sent["a"], timeout=60)
        assert sent["b"] == []
        stop_a.set()
        a.join(30)
        queue.enqueue(QueueItem("act-3", "db.t", "p=3", "merge", settings.priority_classes[-1]))
        _wait(lambda: "act-3" in sent["b"], timeout=60)
        assert "act-3" not in sent["a"]
    finally:
        stop_a.set()
        stop_b.set()
        a.join(30)
        if b.is_alive() or b.ident is not None:
            b.join(30)
