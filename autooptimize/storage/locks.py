"""The one advisory lock: a PostgreSQL session-level lock held on a connection of its own.

The lock lives as long as that connection: a holder that dies (process killed, network gone,
PostgreSQL restarted) loses it, and another process can take it. ``is_held()`` asks PostgreSQL
whether this backend still holds the lock, so a lost connection or a restarted server is noticed
rather than assumed away; TCP keepalives make a silently dropped connection fail within a minute.
"""

from __future__ import annotations

import logging
import os
import time
from types import TracebackType

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from autooptimize.config import Settings

log = logging.getLogger(__name__)

# Probe an idle connection after 30 s, every 10 s, give up after 3 misses (libpq parameters).
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
_RETRY_SECONDS = 0.5
_engines: dict[tuple[int, str], Engine] = {}

_HELD = text("""
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND objsubid = 1
          AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:k, 0)
    )
""")


def _lock_engine(database_url: str) -> Engine:
    """Unpooled (closing a connection really closes it, and its locks go) and autocommit."""
    key = (os.getpid(), database_url)
    engine = _engines.get(key)
    if engine is None:
        engine = create_engine(database_url, poolclass=NullPool, isolation_level="AUTOCOMMIT",
                               connect_args=KEEPALIVES)
        _engines[key] = engine
    return engine


class AdvisoryLock:
    """``with AdvisoryLock(settings, key, wait=s) as lock:`` then ``lock.held`` says whether it was taken.

    ``key`` is any text (hashed with ``hashtextextended(key, 0)``); two holders of one key exclude
    each other across processes and hosts. Without ``wait`` one attempt is made; with it, attempts
    repeat every half second until taken or ``wait`` seconds passed. Leaving the block unlocks and
    closes the connection; a lock not taken leaves nothing behind.
    """

    def __init__(self, settings: Settings, key: str, wait: float | None = None) -> None:
        self.key = key
        self._url = settings.database_url
        self._wait = wait or 0.0
        self._conn: Connection | None = None
        self.held = False

    def acquire(self) -> bool:
        """Try to take the lock (waiting up to ``wait``); True when this object now holds it."""
        if self.held:
            return True
        conn = _lock_engine(self._url).connect()
        deadline = time.monotonic() + self._wait
        try:
            while True:
                taken = bool(conn.execute(text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"),
                                          {"k": self.key}).scalar())
                if taken or time.monotonic() >= deadline:
                    break
                time.sleep(_RETRY_SECONDS)
        except BaseException:
            conn.close()
            raise
        if taken:
            self._conn, self.held = conn, True
        else:
            conn.close()
        return taken

    def is_held(self) -> bool:
        """Whether PostgreSQL still lists this lock as granted to this connection's backend.

        False after a release, when the connection broke, or when the server restarted (the lock
        went with the old backend); the connection is then closed, and ``held`` becomes False.
        """
        if self._conn is None:
            return False
        try:
            still = bool(self._conn.execute(_HELD, {"k": self.key}).scalar())
        except Exception as exc:  # any failure of this connection means the lock is gone with it
            log.warning("advisory lock %r lost: %s", self.key, type(exc).__name__)
            still = False
        if not still:
            self._drop()
        return still

    def release(self) -> None:
        """Unlock (when the connection still works) and close the connection; safe to call twice."""
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": self.key})
        except Exception:  # a broken connection holds nothing; closing it below is all there is to do
            pass
        self._drop()

    def _drop(self) -> None:
        conn, self._conn, self.held = self._conn, None, False
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken
                pass

    def __enter__(self) -> AdvisoryLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
