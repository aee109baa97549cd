"""One Spark Connect session per worker process: created after fork, reused across tasks,
re-created when the server restarted or the channel broke."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from autooptimize.config import Settings
from autooptimize.errors import ServiceUnavailable
from spark_actors.server import resolve_remote, running_server, started_since, stop_local_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_lock = threading.Lock()
_session: SparkSession | None = None
_owner_pid: int | None = None

RUNTIME_CONFS = {
    "spark.sql.parquet.fieldId.read.enabled": "true",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    # Iceberg time (Parquet INT64 TIME micros) reads and writes faithfully only with this on (4.x)
    "spark.sql.timeType.enabled": "true",
}


def _healthy(session: SparkSession) -> bool:
    """One config round trip, no Spark job: it fails when the channel broke, the session was stopped or the
    server restarted (the client then sees another server-side session), and it checks that the session still
    holds our runtime settings. A ``range(1).collect()`` here cost 0.06-0.11 s of every action."""
    try:
        return bool(session.conf.get("spark.sql.session.timeZone") == RUNTIME_CONFS["spark.sql.session.timeZone"])
    except Exception:  # any failure means: build a new session
        return False


def get_session(settings: Settings) -> SparkSession:
    """The process's session; a health check on reuse replaces a session whose server went away."""
    global _session, _owner_pid
    with _lock:
        if _session is not None and _owner_pid == os.getpid() and _healthy(_session):
            return _session
        if _session is not None and _owner_pid == os.getpid():
            log.warning("Spark Connect session is unhealthy; creating a new one")
            try:
                _session.stop()
            except Exception:
                pass
        _session = _create(settings)
        _owner_pid = os.getpid()
        return _session


def _create(settings: Settings) -> SparkSession:
    from pyspark.sql import SparkSession

    remote = resolve_remote(settings)
    try:
        session = SparkSession.builder.remote(remote).create()
        _bound_retries(session)
        for key, value in RUNTIME_CONFS.items():
            session.conf.set(key, value)
        session.range(1).collect()
    except Exception as exc:
        raise ServiceUnavailable(
            f"cannot reach the Spark Connect server ({'local' if settings.spark_remote == 'local' else 'AO_SPARK_REMOTE'}): "
            f"{type(exc).__name__}"
        ) from None
    return session


def fence(settings: Settings, session_id: str) -> int:
    """Interrupt every operation still running in an earlier Spark Connect session; returns how many.

    A worker killed mid-write leaves its job running on the server, which later moves its files into
    place (measured: a killed client's write landed its files 29 s later). The retry attaches to the
    dead worker's session by id and interrupts it; Spark then aborts the job and removes its
    ``_temporary`` directory. A session the server does not know (it restarted) has nothing running;
    the session is released afterwards, so asking again finds it closed, which also means nothing runs.
    """
    from pyspark.sql import SparkSession

    with _lock:
        if _session is not None and _owner_pid == os.getpid() and _session.session_id == session_id:
            return len(_session.interruptAll())
    remote = resolve_remote(settings)
    try:
        other = SparkSession.builder.remote(f"{remote.rstrip(';')};session_id={session_id}").create()
        _bound_retries(other)
    except Exception as exc:
        raise ServiceUnavailable(f"cannot reach the Spark Connect server to fence session {session_id}: "
                                 f"{type(exc).__name__}") from None
    try:
        return len(other.interruptAll())
    except Exception as exc:
        if "SESSION_CLOSED" in str(exc):
            return 0  # released earlier (by a previous fence): nothing can run in it any more
        raise
    finally:
        try:
            other.stop()
        except Exception:  # releasing is best effort; the server expires idle sessions
            pass


def _bound_retries(session: SparkSession) -> None:
    """Give up on a lost server after about 20 s instead of the client's default 10 minutes.

    The action is then requeued with a backoff by the task layer (a lost server is transient, see
    services/actions), so a longer outage costs queue time, not a worker stuck in gRPC retries.
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session.client.set_retry_policies([
        DefaultPolicy(max_retries=8, backoff_multiplier=2.0, initial_backoff=200, max_backoff=5000,
                      max_server_retry_delay=5000)
    ])


def close_session() -> None:
    """Stop this process's session (before its server goes away, so exit does not wait on it)."""
    global _session, _owner_pid
    with _lock:
        if _session is not None and _owner_pid == os.getpid():
            try:
                _session.stop()
            except Exception:
                pass
        _session = None
        _owner_pid = None


def reset_after_fork() -> None:
    """Forget a session inherited from a parent; the child creates its own on first use."""
    global _session, _owner_pid
    _session = None
    _owner_pid = None


@contextlib.contextmanager
def stop_server_started_within(settings: Settings) -> Iterator[None]:
    """For a command that asks for a session only when it needs one (``explain`` and ``whatif --suggest``
    calibrate before a table's first merge): a local Spark Connect server that its asking started is stopped
    when the block ends, however it ends; one that was running before is left alone, and nothing is started
    here. With AO_SPARK_REMOTE set, nothing is started or stopped."""
    if settings.spark_remote != "local":
        yield
        return
    before = running_server(settings)
    try:
        yield
    finally:
        if started_since(settings, before):
            close_session()
            stop_local_server(settings)
