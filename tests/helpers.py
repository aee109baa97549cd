"""Helpers that several test modules share: a free port, the CLI in a child process, and what each
pytest-xdist worker keeps to itself (its Redis databases and Spark Connect port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Redis databases of each pytest-xdist worker: (its session's, a spare one its tests may flush).
WORKER_REDIS_DBS = ((13, 12), (11, 10), (9, 8), (7, 6))
#: Spark Connect ports between two workers' servers (a worker's cluster server takes its port + 1).
WORKER_PORT_STRIDE = 10


def worker_index() -> int:
    """This pytest-xdist worker's number (``gw1`` → 1); 0 outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    if index >= len(WORKER_REDIS_DBS):
        raise RuntimeError(f"pytest-xdist worker {name}: the tests have Redis databases for "
                           f"{len(WORKER_REDIS_DBS)} workers; run with -n {len(WORKER_REDIS_DBS)} or fewer")
    return index


def with_redis_db(url: str, db: int) -> str:
    """``url`` pointing at Redis database ``db``."""
    from urllib.parse import urlsplit

    return urlsplit(url)._replace(path=f"/{db}").geturl()


def spare_redis_url() -> str:
    """This worker's spare Redis database (never its session's, which AO_REDIS_URL names), on the
    session's server: for a test that flushes a database or needs a second one."""
    from redis.connection import parse_url

    session = os.environ["AO_REDIS_URL"]  # tests/conftest.py set it
    spare = WORKER_REDIS_DBS[worker_index()][1]
    return with_redis_db(session, spare if parse_url(session).get("db", 0) != spare else 15)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m autooptimize.cli *args`` in a child process running this checkout's code, with this
    environment (plus ``env``)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "autooptimize.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=timeout)
