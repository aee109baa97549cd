"""Waking a listener at once: ``notify`` publishes the table on a Redis channel of the catalog, and every
listener of the catalog subscribes and wakes when the table is in one of its shards.

The message only wakes. What the listener then does comes from the notice in PostgreSQL
(``storage/notices.py``), written before the message is sent: a message lost (Redis down, a listener
reconnecting) costs at most one listener pass (its ``--interval``), never the notice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import redis

from autooptimize.config import Settings
from autooptimize.redact import redact

log = logging.getLogger("autooptimize.listener")

_RECONNECT_SECONDS = 1.0


def channel(settings: Settings) -> str:
    return f"autooptimize:notify:{settings.catalog}"


def publish(settings: Settings, identifier: str, snapshot_id: int | None) -> bool:
    """Tell the catalog's listeners that ``identifier`` changed; False when Redis could not be reached
    (the notice in PostgreSQL still reaches the listener on its next pass)."""
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.publish(channel(settings), json.dumps({"table": identifier, "snapshot_id": snapshot_id}))
        return True
    except redis.RedisError as exc:
        log.warning("notify: cannot reach Redis at %s (%s); the listener finds the notice on its next pass",
                    redact(settings.redis_url), type(exc).__name__)
        return False
    finally:
        client.close()


class Wakeups:
    """An event the listener waits on between passes, set by a notify for one of its tables (``owns``)
    or by :meth:`wake` (e.g. it took shards). The subscription runs on a daemon thread and reconnects."""

    def __init__(self, settings: Settings, owns: Callable[[str], bool]) -> None:
        self._settings = settings
        self._owns = owns
        self._event = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ao-notify-wake", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Block until woken or ``timeout`` seconds passed; True when woken (and clears it)."""
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def stop(self) -> None:
        self._stop.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            client = redis.Redis.from_url(self._settings.redis_url, socket_connect_timeout=3,
                                          health_check_interval=30)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(channel(self._settings))
                self.subscribed.set()
                failures = 0
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None and self._mine(message.get("data")):
                        self._event.set()
            except (redis.RedisError, OSError) as exc:
                self.subscribed.clear()
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "notify subscription to Redis lost (%s); passes continue, reconnecting", type(exc).__name__)
                self._stop.wait(_RECONNECT_SECONDS)
            finally:
                try:
                    pubsub.close()
                    client.close()
                except Exception:  # already broken
                    pass

    def _mine(self, data: object) -> bool:
        try:
            table = json.loads(data)["table"]  # type: ignore[arg-type]
        except (TypeError, ValueError, KeyError):
            return False
        return isinstance(table, str) and bool(table) and self._owns(table)
