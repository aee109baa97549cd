"""An attempt whose action timeout falls while its Spark job runs (issue 23's finding): the job is
interrupted, nothing is committed, the attempt's output is removed, and the retry commits exactly once.
Real PostgreSQL, Redis, Spark Connect server and Iceberg tables.

The timeout is made to fall inside the job, not left to the machine's speed (a fast, warm server once
finished the whole attempt inside the 1 s timeout): once a task has its ``.writing`` marker down, the
server and its Python workers are paused (SIGSTOP) until the deadline has passed, then resumed."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from autooptimize.errors import Retry
from autooptimize.services import actions, tracking
from spark_actors.server import running_server
from tests.integration.processes import tree_of
from tests.integration.tables import DAY1, DAY2, action_outputs, identifier, live_files, make_table

TIMEOUT = 1


def _writing(table) -> bool:
    root = table.location().removeprefix("file://")
    return any(n.endswith(".writing") for _, _, names in os.walk(root) for n in names)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.mark.spark
def test_an_attempt_timed_out_mid_job_is_retried_and_commits_once(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4, DAY2: 48}, rows=60_000)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="16MiB")
    # a first rewrite gives the table a measured output size, so the second plans without a calibration
    # job and its timeout falls inside the rewrite's Spark job
    first = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
    assert actions.execute(settings, first, spark=spark)["state"] == "succeeded"
    action_id = actions.submit(settings, ident, partition="day=2026-01-02", dispatch=False)
    before = set(live_files(table.refresh()))
    snapshot = table.current_snapshot().snapshot_id
    short = settings.model_copy(update={"action_timeout_seconds": TIMEOUT})
    server = running_server(settings)
    assert server is not None

    result: dict = {}

    def run() -> None:
        try:
            result["outcome"] = actions.execute(short, action_id, spark=spark)
        except Retry as exc:
            result["retry"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()
    while worker.is_alive() and not _writing(table) and time.monotonic() < started + 120:
        time.sleep(0.005)
    paused = []
    if worker.is_alive() and _writing(table):  # a task is writing: hold the job until the deadline is past
        paused = tree_of(server.pid)  # the server JVM, its Python daemon and workers
        _signal_all(paused, signal.SIGSTOP)
        try:
            time.sleep(max(0.0, started + TIMEOUT + 1.5 - time.monotonic()))
        finally:
            _signal_all(paused, signal.SIGCONT)
    worker.join(300)
    assert not worker.is_alive()
    # either the job was paused mid-write past the deadline, or the deadline came before a task wrote
    assert paused or time.monotonic() - started > TIMEOUT, result
    assert "retry" in result, f"the attempt was not stopped by its timeout: {result}"
    assert "ran past AO_ACTION_TIMEOUT_SECONDS" in str(result["retry"])

    assert table.refresh().current_snapshot().snapshot_id == snapshot, "a timed-out attempt committed"
    out = actions.get_outcome(settings, action_id)
    assert out["state"] == "queued" and "ran past" in out["error"]
    assert not [p for p in action_outputs(table) if action_id in p], "the timed-out attempt's output must be removed"
    again = actions.execute(settings, action_id, spark=spark)
    assert (again["state"], again["attempts"]) == ("succeeded", 2), again
    table.refresh()
    assert not set(live_files(table)) & {f for f in before if "day=2026-01-02" in f}
