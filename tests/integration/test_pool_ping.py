"""The connection pool pings a connection only after it sat idle (storage/db._ping_when_idle): an idle
connection whose backend died is replaced before use; a recently used one is handed out unpinged, and
the statement that finds it dead is followed by one on a fresh connection. Real PostgreSQL."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from autooptimize.storage.db import _ping_when_idle, connect_args


def _engine(settings, idle_seconds: float):
    engine = create_engine(settings.database_url, pool_size=1, max_overflow=0,
                           connect_args=connect_args(settings.database_url, application_name="autooptimize-ping"))
    _ping_when_idle(engine, idle_seconds)
    return engine


def _backend(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar())


def _terminate(settings, pid: int) -> None:
    admin = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    finally:
        admin.dispose()


def test_an_idle_connection_that_died_is_replaced_before_use(settings):
    engine = _engine(settings, 0.0)  # every checkout counts as idle: always pinged
    try:
        first = _backend(engine)
        _terminate(settings, first)
        second = _backend(engine)  # no error: the ping found it dead and the pool connected again
        assert second != first
    finally:
        engine.dispose()


def test_a_connection_used_a_moment_ago_is_not_pinged_and_the_next_statement_recovers(settings):
    engine = _engine(settings, 3600.0)  # never idle long enough: never pinged
    try:
        first = _backend(engine)
        with engine.connect() as conn:  # the same pooled connection, handed out without a ping
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar() == first
        _terminate(settings, first)
        try:
            _backend(engine)
            raise AssertionError("a dead connection handed out unpinged should have failed its statement")
        except OperationalError:
            pass
        assert _backend(engine) != first  # the failure invalidated the pool: a fresh connection
    finally:
        engine.dispose()
