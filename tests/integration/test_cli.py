"""Bad input gets a clear error naming it, a non-zero exit, and changes nothing."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select, text

from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, AuditLog, TrackedTable
from tests.helpers import cli
from tests.integration.tables import DAY1, identifier, make_table


def _counts(settings) -> tuple[int, int, int]:
    with session_scope(settings) as s:
        return (s.scalar(select(func.count()).select_from(Action)),
                s.scalar(select(func.count()).select_from(AuditLog)),
                s.scalar(select(func.count()).select_from(TrackedTable)))


@pytest.fixture()
def table(settings, catalog):
    return make_table(catalog, {DAY1: 3})


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["optimize", "test.no_such_table"], ["test.no_such_table", "does not exist"]),
        (["optimize", "not-an-identifier"], ["not-an-identifier", "namespace.table"]),
        (["optimize", "{table}", "--partition", "day"], ["malformed", "day=value"]),
        (["optimize", "{table}", "--partition", "region=eu"], ["region", "valid fields: day"]),
        (["optimize", "{table}", "--partition", "day=yesterday"], ["yesterday", "date"]),
        (["optimize", "{table}", "--target-size", "0"], ["target_file_size", "positive"]),
        (["optimize", "{table}", "--target-size=-5MiB"], ["target_file_size"]),
        (["optimize", "{table}", "--action", "defragment"], ["defragment", "valid actions: merge"]),
        (["optimize", "{table}", "--priority", "urgent!"], ["urgent!", "high, normal, low"]),
        (["track", "{table}", "--target-size", "0"], ["target_file_size", "positive"]),
        (["track", "{table}", "--sort-order", "nope"], ["nope", "columns"]),
    ],
)
def test_bad_input_exits_2_names_the_problem_and_writes_nothing(settings, table, args, needles):
    before = _counts(settings)
    snapshot = table.refresh().current_snapshot().snapshot_id
    result = cli(*[a.format(table=identifier(table)) for a in args])
    assert result.returncode == 2, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    assert "Traceback" not in result.stderr
    assert _counts(settings) == before
    assert table.refresh().current_snapshot().snapshot_id == snapshot


@pytest.mark.parametrize(
    ("env", "code", "needles"),
    [
        ({"AO_DATABASE_URL": "mysql://root@localhost/x"}, 2, ["AO_DATABASE_URL", "PostgreSQL URL"]),
        ({"AO_REDIS_URL": "http://localhost"}, 2, ["AO_REDIS_URL", "redis://"]),
        ({"AO_SPARK_REMOTE": "yarn"}, 2, ["AO_SPARK_REMOTE", "sc://"]),
        ({"AO_DEFAULT_TARGET_FILE_SIZE": "lots"}, 2, ["lots", "64MiB"]),
        ({"AO_DATABASE_URL": "postgresql://postgres:hunter2@127.0.0.1:1/nope"}, 3, ["cannot", "***"]),
    ],
)
def test_broken_configuration_is_named(settings, env, code, needles):
    result = cli("status", env=env)
    assert result.returncode == code, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_unreachable_redis_is_named_and_nothing_is_written(settings, table):
    before = _counts(settings)
    result = cli("optimize", identifier(table), env={"AO_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.returncode == 3
    assert "Redis" in result.stderr and "127.0.0.1:1" in result.stderr
    assert _counts(settings) == before


def test_track_and_status_json(settings, table):
    ident = identifier(table)
    tracked = json.loads(cli("track", ident, "--target-size", "64MiB", "--tolerance", "16MiB", "--priority",
                              "high", "--weight", "2", "--json").stdout)
    assert tracked["target_file_size"] == 64 * 1024 * 1024 and tracked["tolerance"] == 16 * 1024 * 1024
    assert tracked["priority_class"] == "high" and tracked["weight"] == 2
    status = json.loads(cli("status", ident, "--json").stdout)
    assert [p["partition"] for p in status["partitions"]] == ["day=2026-01-01"]
    part = status["partitions"][0]
    assert part["n"] == 3 and part["small_files"] == 3
    assert {"partition", "n", "sse", "mse", "bytes", "small_files", "last_action"} <= set(part)
    overview = json.loads(cli("status", "--json").stdout)
    assert ident in [line["table"] for line in overview]


def test_audit_log_is_append_only(settings):
    with session_scope(settings) as s:
        s.add(AuditLog(event="test.event", detail={}))
    with pytest.raises(Exception, match="append-only"):
        with session_scope(settings) as s:
            s.execute(text("UPDATE ao_audit_log SET event = 'changed'"))
    with pytest.raises(Exception, match="append-only"):
        with session_scope(settings) as s:
            s.execute(text("DELETE FROM ao_audit_log"))
