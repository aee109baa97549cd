"""Kills mid-job on the standalone cluster, default engine: ``kill -9`` of an executor JVM (Spark runs its
tasks again elsewhere) and of the Spark Connect server (the action goes back to the queue and its retry
fences, cleans and rewrites). Either way the action commits exactly once, rows and checksum equal, and
no output is left behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from autooptimize.errors import Retry
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from tests.integration.tables import action_outputs, identifier, live_files, second_reader_checksum
from tests.integration.test_cluster import _groups, make_table

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]


def _writing(table) -> bool:
    root = table.location().removeprefix("file://")
    return any(n.endswith(".writing") for _, _, names in os.walk(root) for n in names)


def _start(settings, session, table):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1GiB")
    action_id = actions.submit(settings, ident, dispatch=False)
    result: dict = {}

    def run() -> None:
        try:
            result["outcome"] = actions.execute(settings, action_id, spark=session)
        except Retry as exc:
            result["retry"] = str(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 180
    while not _writing(table) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.is_alive() and _writing(table), f"the job ended before it could be killed: {result}"
    return action_id, worker, result


def _assert_exactly_once(table, action_id, before):
    time.sleep(3)  # past the end a killed task would have had
    table.refresh()
    assert len([s for s in table.metadata.snapshots
                if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]) == 1
    assert second_reader_checksum(table) == before
    live = {f.removeprefix("file://") for f in live_files(table)}
    assert action_outputs(table) == live, "output left behind"
    assert not _writing(table)


def test_kill_9_of_an_executor_mid_job_runs_its_tasks_elsewhere_and_commits_once(settings, spark_cluster, catalog):
    cluster = spark_cluster.cluster
    table = make_table(catalog, partitions=8, files=3, file_bytes=2 << 20, name="kill_executor")
    before = second_reader_checksum(table)
    executors = cluster.executor_pids()
    assert len(executors) == 2

    action_id, worker, result = _start(settings, spark_cluster.session, table)
    os.kill(executors[0], signal.SIGKILL)
    worker.join(600)

    out = result.get("outcome")
    assert out is not None and out["state"] == "succeeded", result
    assert out["rows_in"] == out["rows_out"] == before[0]
    _assert_exactly_once(table, action_id, before)
    ran_on = {int(g["executor"].rsplit(":", 1)[1]) for g in _groups(settings, action_id)}
    assert executors[0] not in ran_on, "a task of the killed executor was taken as finished"
    deadline = time.monotonic() + 60  # the worker starts a new executor for the application
    while len(cluster.executor_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)


def test_kill_9_of_the_connect_server_mid_job_then_the_retry_commits_once(settings, spark_cluster, catalog):
    from tests.integration.cluster import session_for

    table = make_table(catalog, partitions=8, files=3, file_bytes=2 << 20, name="kill_server")
    before = second_reader_checksum(table)

    action_id, worker, result = _start(settings, spark_cluster.session, table)
    os.kill(spark_cluster.server.pid(), signal.SIGKILL)
    worker.join(600)
    assert "retry" in result, result  # a lost server is transient: the action goes back to the queue
    assert actions.get_outcome(settings, action_id)["state"] == "queued"

    spark_cluster.server.stop()
    spark_cluster.server.start(spark_cluster.settings)
    spark_cluster.session = session_for(spark_cluster.server.info.remote)
    deadline = time.monotonic() + 120
    while True:  # the dead attempt's database lock may take a moment to go
        try:
            out = actions.execute(settings, action_id, spark=spark_cluster.session)
            break
        except Retry:
            assert time.monotonic() < deadline
            time.sleep(2)
    assert out["state"] == "succeeded", out
    assert out["attempts"] == 2
    _assert_exactly_once(table, action_id, before)
