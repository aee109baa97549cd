"""Orient: the backlog per class and table, and a recommendation when it keeps growing."""

from __future__ import annotations

import uuid

from scheduler.orient import queue_status
from tasks.rpq import QueueItem, build_queue


def test_backlog_per_class_and_table_and_advice_when_it_keeps_growing(settings):
    ns = f"test:orient:{uuid.uuid4().hex[:8]}"
    variant = settings.model_copy(update={"dispatch": "rpq", "dispatch_slots": 1})
    queue = build_queue(variant, ns)
    try:
        queue.enqueue(QueueItem("a1", "db.t1", "p=1", "merge", "high"))
        queue.enqueue(QueueItem("a2", "db.t2", "p=1", "merge", "low"))
        queue.enqueue(QueueItem("a3", "db.t2", "p=2", "merge", "low"))
        status = queue_status(variant, ns, sample_every=0)
        assert status["queued"] == 3
        assert status["classes"]["high"] == {"queued": 1, "tables": {"db.t1": 1}}
        assert status["classes"]["low"] == {"queued": 2, "tables": {"db.t2": 2}}
        assert status["recommendation"] is None

        lease = queue.dequeue("high", "db.t1")  # the only slot is busy
        assert lease is not None
        for i in range(4):  # the backlog rises sample after sample
            queue.enqueue(QueueItem(f"b{i}", "db.t3", f"p={i}", "merge", "normal"))
            status = queue_status(variant, ns, sample_every=0)
        assert status["in_flight"] == 1 and status["growing"]
        assert "add actors" in status["recommendation"]
    finally:
        queue.clear()
        queue._redis.delete(f"{ns}:backlog-samples")
