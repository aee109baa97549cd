"""kill -9 of the worker at each step of a rewrite, and a Spark Connect server restart mid-action:
the retried action ends with exactly one commit, every row once, and no stray files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from tests.integration.tables import (
    DAY1,
    action_outputs,
    identifier,
    live_files,
    make_table,
    second_reader_checksum,
)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys
from autooptimize.config import get_settings
from autooptimize.services import actions
from autooptimize.domain.actions import Hooks

def die(*_):
    os.kill(os.getpid(), 9)

point = sys.argv[2]
hooks = Hooks(before_commit=die) if point == "before_commit" else Hooks(after_commit=die) \
    if point == "after_commit" else Hooks()
actions.execute(get_settings(), sys.argv[1], hooks=hooks)
print("finished without being killed")
"""


def _table(catalog, rows=30_000, files=6):
    table = make_table(catalog, {DAY1: files}, rows=rows)
    tracking.track(settings_of[0], identifier(table), target_file_size="64MiB")
    return table


settings_of: list = []


def _child(action_id: str, point: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, action_id, point], cwd=ROOT, env=os.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _retry(settings, action_id, spark, timeout=120.0):
    """Run the action again as the queue would: a Retry (the dead worker's database lock not yet
    released by PostgreSQL) waits and tries again."""
    from autooptimize.errors import Retry

    deadline = time.monotonic() + timeout
    while True:
        try:
            return actions.execute(settings, action_id, spark=spark)
        except Retry:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def _temporary_dirs(table) -> list[str]:
    """Where a write is under way: a Spark SQL job's _temporary, or a task's .writing marker (the default
    engine's executors write their files in place, spark_actors/group_tasks.writing)."""
    root = table.location().removeprefix("file://")
    return [d for d, _, names in os.walk(root)
            if "/ao-" in d and (d.endswith("/_temporary") or any(n.endswith(".writing") for n in names))]


def _assert_exactly_once(table, action_id, before, second, files_before):
    table.refresh()
    snapshots = [s for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]
    assert len(snapshots) == 1, "the action must commit exactly once"
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second
    live = set(live_files(table))
    assert not live & files_before, "every input must be replaced"
    # no stray files: everything in the action's directories is live, and no Spark leftovers
    location = table.location().removeprefix("file://")
    assert {f"file://{f}" for f in action_outputs(table)} <= live | {f"{location}/{f}" for f in ()}
    assert not _temporary_dirs(table)


@pytest.mark.parametrize("point", ["during_write", "before_commit", "after_commit"])
def test_kill_9_at_each_step_then_retry_commits_exactly_once(settings, spark, catalog, point):
    settings_of[:] = [settings]
    table = _table(catalog)
    ident = identifier(table)
    before, second = table_checksum(table), second_reader_checksum(table)
    files_before = set(live_files(table))
    # the default engine: the worker dies while its action's Spark job writes; the retry fences that job
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)

    child = _child(action_id, point)
    if point == "during_write":
        deadline = time.monotonic() + 180
        while not _temporary_dirs(table) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.poll() is None, f"the write finished before it could be killed: {child.communicate()}"
        child.kill()
    _, err = child.communicate(timeout=300)
    assert child.returncode == -9, err[-2000:]

    if point == "after_commit":
        assert len([s for s in table.refresh().metadata.snapshots
                    if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]) == 1
    assert actions.get_outcome(settings, action_id)["state"] == "running"  # the bookkeeping never happened

    out = _retry(settings, action_id, spark)
    assert out["state"] == "succeeded", out
    expected_reason = {"during_write": None, "before_commit": "resumed_from_checkpoint",
                       "after_commit": "already_committed"}[point]
    assert out["reason"] == expected_reason
    assert out["attempts"] == 2
    # a stale Spark job of the killed worker must not land files later: wait past its natural end
    time.sleep(3 if point == "during_write" else 0)
    _assert_exactly_once(table, action_id, before, second, files_before)


def test_spark_server_restart_mid_action_is_survived_on_retry(settings, spark, catalog):
    """The server is killed (SIGKILL) mid-write and started again; the retry writes anew and commits once."""
    import signal
    import threading

    from autooptimize.errors import Retry
    from spark_actors.server import ensure_local_server, running_server

    settings_of[:] = [settings]
    table = _table(catalog)
    before, second = table_checksum(table), second_reader_checksum(table)
    files_before = set(live_files(table))
    # the default engine: the Spark server restarts under the action's job
    action_id = actions.submit(settings, identifier(table), partition="day=2026-01-01", dispatch=False)
    first: dict = {}

    def run() -> None:
        try:
            first["outcome"] = actions.execute(settings, action_id)
        except Retry as exc:
            first["retry"] = str(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 180
    while not _temporary_dirs(table) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.is_alive(), f"the write finished before the server could be killed: {first}"
    server = running_server(settings)
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    worker.join(300)
    assert "retry" in first, first  # a lost server is transient: the action goes back to the queue
    assert actions.get_outcome(settings, action_id)["state"] == "queued"
    ensure_local_server(settings)

    out = actions.execute(settings, action_id)
    assert out["state"] == "succeeded", out
    assert out["attempts"] == 2
    _assert_exactly_once(table, action_id, before, second, files_before)


def test_kill_9_during_a_delete_compaction_write_then_retry(settings, spark, catalog):
    from tests.integration.deletes import data_files, delete_positions, reference_checksum

    settings_of[:] = [settings]
    table = make_table(catalog, {DAY1: 6}, rows=30_000)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="64MiB", allowed_actions="merge,sort,compact_deletes")
    files = data_files(table, "day=2026-01-01")
    delete_positions(table, {f: range(0, 30_000, 7) for f in files})
    expected = reference_checksum(table)
    # the default engine, as above
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", kind="compact_deletes", dispatch=False)

    child = _child(action_id, "during_write")
    deadline = time.monotonic() + 180
    while not _temporary_dirs(table) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.poll() is None, f"the write finished before it could be killed: {child.communicate()}"
    child.kill()
    child.communicate(timeout=300)

    out = _retry(settings, action_id, spark)
    assert out["state"] == "succeeded", out
    assert out["attempts"] == 2
    time.sleep(3)  # past the end the killed job would have had
    table.refresh()
    assert len([s for s in table.metadata.snapshots
                if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]) == 1
    assert table_checksum(table) == expected == reference_checksum(table)
    live = set(live_files(table))
    assert {f"file://{f}" for f in action_outputs(table)} <= live
    assert not _temporary_dirs(table)
