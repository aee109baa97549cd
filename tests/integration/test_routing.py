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
