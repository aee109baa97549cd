"""The one module that sends tasks (``apply_async``)."""

from __future__ import annotations

from typing import Any

import redis

from autooptimize.config import Settings, redact_url
from autooptimize.errors import ServiceUnavailable
from tasks.routing import actor_queue, task_priority

MERGE_TASK = "autooptimize.merge"


def check_broker(settings: Settings) -> None:
    """Raise ServiceUnavailable naming the URL (password masked) when Redis does not answer."""
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        raise ServiceUnavailable(f"cannot reach Redis at {redact_url(settings.redis_url)}: {exc}") from None


def send_action(settings: Settings, action_id: str, *, priority_class: str, label: dict[str, Any]) -> None:
    """Queue an action on its class's actor queue; Flower shows ``label`` beside the id."""
    from tasks.app import app

    kwargs = {"action_id": action_id}
    app.send_task(
        MERGE_TASK,
        kwargs=kwargs,
        queue=actor_queue(priority_class),
        priority=task_priority(priority_class, settings.priority_classes),
        kwargsrepr=repr({"action_id": action_id, **label}),
        task_id=f"{action_id}",
    )
