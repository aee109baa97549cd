"""Engine and session helpers: one engine per process (re-made after fork), the database created
if missing, and ``upgrade()`` applying the Alembic migrations."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from autooptimize.config import Settings
from autooptimize.errors import ConfigError, InvalidArgument, ServiceUnavailable
from autooptimize.redact import redact

_engines: dict[tuple[int, str], Engine] = {}

#: Seconds a connection attempt may take before it fails (libpq ``connect_timeout``).
CONNECT_TIMEOUT_SECONDS = 10
#: A statement running (or waiting for a lock) longer than this is cancelled and its transaction rolls
#: back: nothing the service runs takes that long, and a wait behind a dead holder must end. No
#: lock_timeout: observers wait on one table's transaction lock (storage/stats.lock_table) by design.
STATEMENT_TIMEOUT_MS = 15 * 60 * 1000
# Keepalives both ways: the client notices a dead server (libpq keepalives_*, tcp_user_timeout for data
# never acknowledged), and the server notices a dead client host and ends its session, and with it its
# advisory locks, within about a minute instead of the kernel's two hours (server tcp_keepalives_*).
_CLIENT = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
           "tcp_user_timeout": 60_000, "connect_timeout": CONNECT_TIMEOUT_SECONDS}
_SERVER = {"tcp_keepalives_idle": 30, "tcp_keepalives_interval": 10, "tcp_keepalives_count": 3}


def connect_args(database_url: str, *, application_name: str,
                 statement_timeout_ms: int = STATEMENT_TIMEOUT_MS) -> dict[str, object]:
    """libpq parameters for every connection the service opens: keepalives both ways, a connect timeout,
    a statement timeout and an application name (what ``pg_stat_activity`` shows). A parameter the
    URL's query already sets is left to the URL."""
    given = set(make_url(database_url).query)
    server = {**_SERVER, "statement_timeout": statement_timeout_ms}
    args: dict[str, object] = {**_CLIENT, "application_name": application_name,
                               "options": " ".join(f"-c {k}={v}" for k, v in server.items())}
    return {k: v for k, v in args.items() if k not in given}


def get_engine(settings: Settings) -> Engine:
    """The process's engine for ``settings.database_url``; a forked child gets its own pool."""
    key = (os.getpid(), settings.database_url)
    engine = _engines.get(key)
    if engine is None:
        # pre-ping: a connection PostgreSQL dropped (a restart) is replaced before use, not failed on (about
        # 1 % of the listener's and decide's CPU, measured; tests/integration/test_fencing.py relies on it)
        engine = create_engine(settings.database_url, pool_pre_ping=True, pool_size=5, max_overflow=5,
                               connect_args=connect_args(settings.database_url, application_name="autooptimize"))
        _engines[key] = engine
    return engine


def reset_engines_after_fork() -> None:
    """Drop pools inherited from a parent process without closing the parent's connections."""
    for key, engine in list(_engines.items()):
        if key[0] != os.getpid():
            engine.dispose(close=False)
            del _engines[key]


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """A session that commits on success and rolls back on error; the one place that commits."""
    factory = sessionmaker(get_engine(settings), expire_on_commit=False)
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ensure_database(settings: Settings) -> None:
    """Create the configured database if it does not exist (the server must be reachable)."""
    url = make_url(settings.database_url)
    name = url.database or ""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]{0,62}", name):
        raise ConfigError(
            f"AO_DATABASE_URL names database {name!r}; use letters, digits, '_' or '-' (max 63 chars)"
        )
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=None)
    try:
        with admin.connect() as conn:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
            if not exists:
                # Identifiers cannot be bound parameters; the name was validated above and is quoted.
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except OperationalError as exc:
        raise ServiceUnavailable(
            f"cannot reach PostgreSQL at {redact(settings.database_url)}: {exc.orig}".strip()
        ) from None
    finally:
        admin.dispose()


def alembic_config(settings: Settings):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    location = resources.files("migrations")
    cfg = Config(str(location / "alembic.ini"))
    cfg.set_main_option("script_location", str(location))
    # '%' is ConfigParser interpolation syntax: escape it so passwords survive.
    cfg.set_main_option("sqlalchemy.url", settings.database_url.replace("%", "%%"))
    return cfg


def known_revisions(settings: Settings) -> list[str]:
    """The migration revisions ``upgrade`` accepts besides ``head``, oldest first (reads no database)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(settings))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Create the database if missing and apply migrations up to ``revision`` (``head`` or a known
    revision id); an unknown revision raises InvalidArgument before anything is created or changed."""
    from alembic import command
    from alembic.util import CommandError

    valid = ["head", *known_revisions(settings)]
    if revision not in valid:
        raise InvalidArgument(f"revision {revision!r} is not a migration of autooptimize; valid: {', '.join(valid)}")
    ensure_database(settings)
    try:
        command.upgrade(alembic_config(settings), revision)
    except CommandError as exc:  # e.g. a revision older than the database's: nothing was applied
        raise InvalidArgument(f"cannot upgrade to revision {revision!r}: {redact(str(exc))}") from None


def check_schema(settings: Settings) -> None:
    """Raise ServiceUnavailable with a hint when the database is unreachable or not migrated."""
    try:
        with get_engine(settings).connect() as conn:
            present = conn.execute(text("SELECT to_regclass('ao_actions') IS NOT NULL")).scalar()
    except OperationalError as exc:
        raise ServiceUnavailable(
            f"cannot reach PostgreSQL at {redact(settings.database_url)}: {exc.orig}".strip()
            + " (is it running? run `autooptimize db upgrade` once it is)"
        ) from None
    if not present:
        raise ServiceUnavailable(
            f"database {redact(settings.database_url)} has no autooptimize schema; "
            "run `autooptimize db upgrade`"
        )
