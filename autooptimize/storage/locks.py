"""The one advisory lock: a PostgreSQL session-level lock held on a connection of its own.

The lock lives as long as that connection: a holder that dies (process killed, network gone,
PostgreSQL restarted) loses it, and another process can take it. ``is_held()`` asks PostgreSQL
whether this backend still holds the lock, so a lost connection or a restarted server is noticed
rather than assumed away; TCP keepalives both ways (storage/db.connect_args) make a silently dropped
connection fail within a minute on our side and end the session, and the lock, on the server's.

A holder re-checks before every step that must not happen twice or after someone else took over:
:meth:`AdvisoryLock.ensure` raises LeaseLost when the lock is gone, and the lock is a fence
(``domain/fencing.py``), so ``with fenced(lock):`` makes every catalog swap and deletion ask first.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from autooptimize.config import Settings
from autooptimize.errors import LeaseLost
from autooptimize.storage.db import connect_args

log = logging.getLogger(__name__)

_RETRY_SECONDS = 0.5
# the lock's own statements are instant; one that hangs means the server is in trouble
_STATEMENT_TIMEOUT_MS = 30_000
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
                               connect_args=connect_args(database_url, application_name="autooptimize-lock",
                                                         statement_timeout_ms=_STATEMENT_TIMEOUT_MS))
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
        self._mutex = threading.Lock()  # one connection: its users (e.g. observer threads) take turns
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
        with self._mutex:
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

    def ensure(self, what: str = "continue") -> None:
        """Raise LeaseLost (nothing done) unless PostgreSQL still lists the lock as this holder's."""
        if not self.is_held():
            raise LeaseLost(f"lock {self.key!r} was lost (connection gone or server restarted); "
                            f"not going to {what}", delay=5.0)

    def before_commit(self, what: str) -> None:
        self.ensure(what)

    def before_delete(self, what: str) -> None:
        self.ensure(f"delete {what}")

    def release(self) -> None:
        """Unlock (when the connection still works) and close the connection; safe to call twice."""
        with self._mutex:
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
