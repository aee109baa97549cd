"""The one advisory lock (autooptimize/storage/locks.py) against the real PostgreSQL."""

from __future__ import annotations

import time

from sqlalchemy import text

from autooptimize.storage.db import get_engine
from autooptimize.storage.locks import AdvisoryLock


def _backend_pid(lock: AdvisoryLock) -> int:
    assert lock._conn is not None
    return int(lock._conn.execute(text("SELECT pg_backend_pid()")).scalar())


def test_the_lock_is_exclusive_across_connections(settings) -> None:
    with AdvisoryLock(settings, "test.locks:exclusive") as first:
        assert first.held and first.is_held()
        with AdvisoryLock(settings, "test.locks:exclusive") as second:
            assert not second.held and not second.is_held()
        with AdvisoryLock(settings, "test.locks:other key") as other:
            assert other.held
        # a plain connection of the pool cannot take it either
        with get_engine(settings).connect() as conn:
            taken = conn.execute(text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"),
                                 {"k": "test.locks:exclusive"}).scalar()
            conn.commit()
            assert taken is False
        assert first.is_held()


def test_the_lock_is_released_on_exit_and_on_error(settings) -> None:
    with AdvisoryLock(settings, "test.locks:exit") as first:
        assert first.held
    assert not first.held and not first.is_held()
    with AdvisoryLock(settings, "test.locks:exit") as again:
        assert again.held
    try:
        with AdvisoryLock(settings, "test.locks:exit") as failing:
            assert failing.held
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    with AdvisoryLock(settings, "test.locks:exit") as after_error:
        assert after_error.held


def test_waiting_takes_the_lock_once_free_or_gives_up(settings) -> None:
    with AdvisoryLock(settings, "test.locks:wait"):
        started = time.monotonic()
        with AdvisoryLock(settings, "test.locks:wait", wait=1.0) as waiter:
            assert not waiter.held
        assert time.monotonic() - started >= 1.0


def test_the_lock_goes_with_its_connection_and_is_held_notices(settings) -> None:
    holder = AdvisoryLock(settings, "test.locks:terminated")
    assert holder.acquire() and holder.is_held()
    pid = _backend_pid(holder)
    with get_engine(settings).connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar() is True
        conn.commit()
    deadline = time.monotonic() + 10
    with AdvisoryLock(settings, "test.locks:terminated") as successor:
        while not successor.held and time.monotonic() < deadline:
            time.sleep(0.1)
            successor.acquire()
        assert successor.held
        assert holder.is_held() is False
        assert not holder.held
        holder.release()  # releasing a lost lock is harmless
        assert successor.is_held()
