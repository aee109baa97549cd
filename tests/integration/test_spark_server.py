"""The local Spark Connect server takes a token and binds loopback only; sessions are re-created."""

from __future__ import annotations

import json

import pytest

from spark_actors import session as session_module
from spark_actors.server import running_server

pytestmark = pytest.mark.spark


def test_server_rejects_clients_without_the_token(settings, spark):
    from pyspark.sql import SparkSession

    info = running_server(settings)
    assert info is not None
    token_file = settings.home_dir / "spark" / "server.json"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert json.loads(token_file.read_text())["token"] == info.token
    bad = SparkSession.builder.remote(f"sc://localhost:{info.port}/;token=wrong-token").create()
    try:
        with pytest.raises(Exception) as excinfo:
            bad.range(1).collect()
    finally:
        bad.stop()
    assert "token" in str(excinfo.value).lower() or "unauthenticated" in str(excinfo.value).lower()


def test_session_is_reused_and_replaced_when_broken(settings, spark):
    first = session_module.get_session(settings)
    assert session_module.get_session(settings) is first
    first.stop()  # a broken session (as after a server restart) fails its health check
    second = session_module.get_session(settings)
    assert second is not first
    assert second.range(4).count() == 4


def test_the_health_check_runs_no_spark_job_and_replaces_a_session_without_our_settings(settings, spark):
    first = session_module.get_session(settings)
    assert session_module._healthy(first)
    first.conf.set("spark.sql.session.timeZone", "America/New_York")  # as a session the server made anew
    second = session_module.get_session(settings)
    assert second is not first
    assert second.conf.get("spark.sql.session.timeZone") == "UTC" and second.range(3).count() == 3
