"""Each Celery queue receives only what is sent to it (real Redis broker, no worker)."""

from __future__ import annotations

import redis


def _lengths(client: redis.Redis) -> dict[str, int]:
    lengths: dict[str, int] = {}
    for key in client.scan_iter("ao.*"):
        name = key.decode()
        if client.type(key) == b"list":
            base = name.split(":")[0]
            lengths[base] = lengths.get(base, 0) + client.llen(key)
    return lengths


def test_a_task_sent_to_one_queue_lands_in_that_queue_only(settings):
    from tasks.app import app
    from tasks.routing import BUFFER_QUEUE, CONTROL_QUEUE, actor_queue

    client = redis.Redis.from_url(settings.redis_url)
    client.flushdb()
    targets = [actor_queue(c) for c in settings.priority_classes] + [CONTROL_QUEUE, BUFFER_QUEUE]
    try:
        for target in targets:
            app.send_task("autooptimize.merge", args=["not-an-action"], queue=target)
        assert _lengths(client) == {t: 1 for t in targets}
    finally:
        client.flushdb()


def _sent(client: redis.Redis, queue: str) -> list[dict]:
    """The messages waiting in ``queue`` (every priority list), as kombu wrote them."""
    import json

    messages = []
    for key in client.scan_iter(f"{queue}*"):
        if client.type(key) == b"list":
            messages += [json.loads(raw) for raw in client.lrange(key, 0, -1)]
    return messages


def test_each_action_kind_is_sent_as_its_own_task(settings):
    from tasks.routing import actor_queue, task_name
    from tasks.rpq import Lease, LeaseTicket, QueueItem
    from tasks.send import send_action, send_leased_action

    client = redis.Redis.from_url(settings.redis_url)
    client.flushdb()
    cls = settings.priority_classes[-1]
    try:
        # direct mode: the kind comes with the label
        send_action(settings, "act-sort", priority_class=cls,
                    label={"table": "db.t", "partition": "day=1", "kind": "sort"})
        # rpq mode: the kind comes with the leased item
        item = QueueItem("act-expire", "db.t", "", "expire_snapshots", cls)
        send_leased_action(settings, LeaseTicket(Lease(item, "token", 0.0, 1), "ao:rpq", 60.0))
        headers = {m["headers"]["id"]: m["headers"] for m in _sent(client, actor_queue(cls))}
        assert headers["act-sort"]["task"] == "autooptimize.sort" == task_name("sort")
        assert headers["act-expire"]["task"] == "autooptimize.expire_snapshots" == task_name("expire_snapshots")
        # Flower shows table, partition, kind and the action id
        for shown in (headers["act-sort"]["kwargsrepr"], headers["act-expire"]["kwargsrepr"]):
            assert all(word in shown for word in ("'table'", "'partition'", "'kind'", "'action_id'"))
        assert "'sort'" in headers["act-sort"]["kwargsrepr"]
        assert "'expire_snapshots'" in headers["act-expire"]["kwargsrepr"]
    finally:
        client.flushdb()


def test_every_action_kind_has_a_registered_task():
    from autooptimize.services.kinds import KINDS
    from tasks.app import app
    from tasks.routing import task_name

    app.loader.import_default_modules()  # what a worker does at start: the app's include list
    assert {task_name(kind) for kind in KINDS} <= set(app.tasks)
    assert "autooptimize.consolidate" in app.tasks
