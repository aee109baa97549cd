"""An actor worker process gets its Spark side ready as it starts (spark_actors/warmup.py), on the test
session's real Spark Connect server."""

from __future__ import annotations

import pytest

from spark_actors import artifacts, session
from spark_actors.warmup import warm_up, warm_up_in_background
from tasks.app import does_spark_work

pytestmark = pytest.mark.spark


def test_only_a_worker_that_takes_spark_work_warms_up():
    assert not does_spark_work(["ao.control"])
    assert does_spark_work(["ao.control", "ao.actor.normal"])
    assert does_spark_work(["ao.buffer"])


def test_the_warm_up_opens_the_session_ships_the_code_and_reaches_the_executors(settings, spark_server):
    session.close_session()  # as a freshly forked worker process: no session, no code shipped yet
    figures = warm_up(settings)
    assert figures["python_workers"] >= 1
    assert figures["memory_pools"] == "system"  # spark_actors/server.MEMORY_POOL_CONF
    assert figures["total"] >= figures["session"] + figures["job"] * 0.99
    spark = session.get_session(settings)
    # the first action finds the session open, with our code on it (not shipped again)
    assert spark.session_id in {key[0] for key in artifacts._shipped}
    assert artifacts.ship_code(spark) is False


def test_a_warm_up_that_cannot_reach_the_server_logs_it_and_leaves_no_session(settings, caplog):
    session.close_session()
    unreachable = settings.model_copy(update={"spark_remote": "sc://127.0.0.1:1"})
    with caplog.at_level("WARNING", logger="spark_actors.warmup"):
        warm_up_in_background(unreachable).join(timeout=120)
    assert "actor warm-up failed (ServiceUnavailable)" in caplog.text
    assert session._session is None
