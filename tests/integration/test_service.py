"""The running service: `autooptimize up` (worker, beat, Flower with auth), a merge through Celery,
and clean shutdown on SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autooptimize import api
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit_events
from tests.helpers import free_port
from tests.integration.tables import DAY1, DAY2, identifier, live_files, make_table

pytestmark = pytest.mark.spark



def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, ConnectionError):
        return 0, b""


def _children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def _warm_lines(log: Path, offset: int) -> int:
    """How many "actor warm" lines ``log`` gained after its first ``offset`` bytes."""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().count(b"actor warm: Spark session open")


def test_up_runs_worker_and_authenticated_flower_then_stops_cleanly(settings, spark, catalog):
    port = free_port()
    env = {**os.environ, "AO_FLOWER_PORT": str(port), "AO_FLOWER_USER": "ops", "AO_FLOWER_PASSWORD": "s3cret-pw",
           "AO_CONSOLE_PORT": str(free_port())}
    worker_log = settings.home_dir / "logs" / "worker-0.log"
    logged_before = worker_log.stat().st_size if worker_log.exists() else 0
    proc = subprocess.Popen([sys.executable, "-m", "autooptimize.cli", "up", "--workers", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            status, _ = _get(f"http://127.0.0.1:{port}/")
            if status in (200, 401):
                break
            time.sleep(0.5)
        assert _get(f"http://127.0.0.1:{port}/")[0] == 401, "Flower must require authentication"
        assert _get(f"http://127.0.0.1:{port}/", ("ops", "wrong"))[0] == 401
        assert _get(f"http://127.0.0.1:{port}/", ("ops", "s3cret-pw"))[0] == 200

        table = make_table(catalog, {DAY1: 5, DAY2: 2})
        checksum = table_checksum(table)
        api.track(identifier(table), settings=settings, target_file_size="1MiB")
        handle = api.optimize(identifier(table), partition="day=2026-01-01", settings=settings)
        result = handle.wait(timeout=180)
        assert result["state"] == "succeeded", result
        assert (result["files_in"], result["files_out"]) == (5, 1)
        assert table_checksum(table) == checksum
        # day 1 is one file now; day 2 (two small files) may also have been merged by the running
        # listener in the meantime, which is the service doing its job
        assert len([f for f in live_files(table) if "day=2026-01-01" in f]) == 1
        assert len([f for f in live_files(table) if "day=2026-01-02" in f]) in (1, 2)
        with session_scope(settings) as s:
            events = [e.event for e in audit_events(s, handle.id)]
        assert events[0] == "action.submitted" and events[-1] == "action.succeeded"

        # Flower shows the task by its namespaced name, with the table in its arguments
        deadline = time.monotonic() + 20
        tasks: dict = {}
        while time.monotonic() < deadline and handle.id not in tasks:
            status, body = _get(f"http://127.0.0.1:{port}/api/tasks", ("ops", "s3cret-pw"))
            tasks = json.loads(body or b"{}") if status == 200 else {}
            time.sleep(1)
        assert tasks[handle.id]["name"] == "autooptimize.merge"
        assert identifier(table) in tasks[handle.id]["kwargs"]

        # each of the actor worker's processes got its Spark side ready as it started (spark_actors/warmup.py)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _warm_lines(worker_log, logged_before) < settings.worker_concurrency:
            time.sleep(0.5)
        assert _warm_lines(worker_log, logged_before) == settings.worker_concurrency, worker_log.read_bytes()[logged_before:][-3000:]

        children = _children_of(proc.pid)
        # actor worker, control worker, listener, beat, flower, console, and the fair dispatcher when actions go through the RPQ
        assert len(children) == 6 + (settings.dispatch == "rpq")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output = proc.communicate(timeout=90)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, output
    assert "autooptimize stopped" in output
    assert "s3cret-pw" not in output, "the Flower password must not be printed"
    time.sleep(1)
    assert not [c for c in children if _alive(c)], "every child must be stopped"
    # the Spark server was already running (the test session's), so `up` must leave it alone
    assert spark.range(3).count() == 3
