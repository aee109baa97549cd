"""Settings: parsing, validation messages that name the variable and what is valid, and secrets."""

from __future__ import annotations

import threading

import pytest

from autooptimize.config import Settings, load_settings
from autooptimize.domain.sizes import MAX_BYTES, MiB, parse_size
from autooptimize.errors import ConfigError, InvalidArgument
from tasks.routing import actor_queue, task_priority


@pytest.mark.parametrize(
    ("text", "expected"),
    [("134217728", 134217728), ("128MiB", 128 * MiB), ("64MB", 64 * MiB), ("1.5GiB", 1536 * MiB),
     ("512KiB", 512 * 1024), ("2 G", 2048 * MiB), (4096, 4096), ("0.5KiB", 512), (str(MAX_BYTES), MAX_BYTES),
     ("8388607TiB", 8388607 * 1024**4)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "12XB", "", "MiB", "1..2MiB", "1.5", "0.5B", "-1", "-5MiB", "1e9",
                                  str(MAX_BYTES + 1), "8EiB", "99999999999999999999", "8388608TiB", "64MiB\n",
                                  " 64\x00MiB", True, 1.5, None, -1, MAX_BYTES + 1])
def test_parse_size_rejects_nonsense_naming_the_value(text):
    with pytest.raises(InvalidArgument, match="target.*(64MiB|bytes)"):
        parse_size(text, "target")


def test_defaults_are_the_documented_ones(monkeypatch):
    for name in ("AO_DATABASE_URL", "AO_REDIS_URL", "AO_SPARK_REMOTE", "AO_CATALOG", "AO_HOME"):
        monkeypatch.delenv(name, raising=False)
    s = Settings()
    assert s.database_url == "postgresql+psycopg2://postgres@localhost:5432/autooptimize"
    assert s.redis_url == "redis://localhost:6379/0"
    assert s.spark_remote == "local" and s.catalog == "autooptimize"
    assert s.default_target_file_size == 128 * MiB and s.tolerance_default == 32 * MiB
    assert s.priority_classes == ("high", "normal", "low")
    assert s.dispatch == "rpq" and s.dispatch_slots is None and s.slots == s.worker_concurrency == 2


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [("AO_DATABASE_URL", "mysql://root@localhost/x", "PostgreSQL URL"), ("AO_REDIS_URL", "amqp://x", "redis://"),
     ("AO_SPARK_REMOTE", "yarn", "sc://"), ("AO_CATALOG", "bad name!", "catalog name"),
     ("AO_PRIORITY_CLASSES", "High,,", "lower-case"), ("AO_SPARK_PORT", "x", "integer"), ("AO_WORKER_CONCURRENCY", "0", "greater than"),
     # sizes: fractions of a byte, beyond PostgreSQL's bigint, negative
     ("AO_MAX_GROUP_BYTES", "1.5", "fraction of a byte"), ("AO_MAX_GROUP_BYTES", "99999999999999999999", "out of range"),
     ("AO_DEFAULT_TARGET_FILE_SIZE", "-64MiB", "not a size"), ("AO_BUFFER_MAX_BYTES", "0.1", "fraction"),
     ("AO_DEFAULT_TOLERANCE", "0", "greater than 0"),
     # numbers: fractions where integers are expected, infinities, beyond an integer column
     ("AO_ACTION_TIMEOUT_SECONDS", "1.5", "integer"), ("AO_SETTLE_SECONDS", "nan", "finite"),
     ("AO_AUTO_TRACK_SECONDS", "inf", "finite"), ("AO_LEASE_SECONDS", "99999999999", "at most 2147483647"),
     ("AO_MAX_ATTEMPTS", "-1", "greater than or equal to 1"),
     # URLs
     ("AO_REDIS_URL", "redis://h:port/0", "port"), ("AO_REDIS_URL", "redis://h:6379/zero", "database"),
     ("AO_REDIS_URL", "redis://h :6379/0", "spaces"), ("AO_DATABASE_URL", "postgresql://u@h:99999/db", "port"),
     ("AO_DATABASE_URL", "postgresql://u@h/my%20db", "database"), ("AO_SPARK_REMOTE", "sc://", "no host"),
     ("AO_SPARK_REMOTE", "sc://h:15002/;token=", "empty token"), ("AO_SPARK_REMOTE", "sc://h:x", "port"),
     # names, paths and the rest
     ("AO_FLOWER_USER", "ad:min", "no ':'"), ("AO_FLOWER_USER", "", "user name"),
     ("AO_FLOWER_ADDRESS", "0.0.0.0; rm", "host name"), ("AO_HOME", "/tmp/a\nb", "control characters"),
     ("AO_SPARK_DRIVER_MEMORY", "lots", "512m"), ("AO_CATALOG", "cat\n", "catalog name"),
     # an empty home is not "the working directory"; a class named twice is not two classes
     ("AO_HOME", "", "not empty"), ("AO_HOME", "  ", "not empty"), ("AO_BUFFER_ROOT", "", "not empty"),
     ("AO_PRIORITY_CLASSES", "high,high", "high given more than once"),
     ("AO_PRIORITY_CLASSES", "high,low,normal,low", "low given more than once"),
     ("AO_RETENTION_AUDIT_DAYS", "0", "greater than 0"), ("AO_RETENTION_SWEEP_SECONDS", "1", "greater than"),
     ("AO_LISTENER_INTERVAL_SECONDS", "0", "greater than or equal to 0.05"),
     ("AO_LISTENER_INTERVAL_SECONDS", "90", "less than or equal to 60"),
     ("AO_AUTOTUNE_PASS_SECONDS", "3601", "at most AO_AUTOTUNE_SECONDS (3600)"),
     ("AO_AUTOTUNE_PASS_SECONDS", "0", "greater than or equal to 1"),
     ("AO_AUTOTUNE_MIN_NEW_COMMITS", "0", "greater than or equal to 1")],
)
def test_invalid_settings_name_the_variable(monkeypatch, name, value, needle):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as excinfo:
        load_settings()
    assert name in str(excinfo.value) and needle in str(excinfo.value)


def test_postgres_url_forms_are_normalised(monkeypatch):
    monkeypatch.setenv("AO_DATABASE_URL", "postgres://u@h:5432/db")
    assert load_settings().database_url == "postgresql+psycopg2://u@h:5432/db"


@pytest.mark.parametrize(("name", "value"), [
    ("AO_REDIS_URL", "redis://:pw-with-colon:x@redis:6379/0"), ("AO_REDIS_URL", "rediss://u:p@[::1]:6380/2"),
    ("AO_REDIS_URL", "redis://localhost"), ("AO_DATABASE_URL", "postgresql://u:p%40ss@db.example.com/ao-prod"),
    ("AO_SPARK_REMOTE", "sc://spark:15002/;use_ssl=true"), ("AO_FLOWER_USER", "ops.team@example"),
    ("AO_FLOWER_ADDRESS", "0.0.0.0"), ("AO_DEFAULT_TOLERANCE", "32MiB"), ("AO_MAX_GROUP_BYTES", "1.5GiB"),
    ("AO_LISTENER_INTERVAL_SECONDS", "0.2"), ("AO_AUTOTUNE_PASS_SECONDS", "3600"),
])
def test_valid_values_are_accepted(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    load_settings()


@pytest.mark.parametrize("name", ["AO_FLOWER_PASSWORD", "AO_SPARK_TOKEN"])
@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_empty_secrets_are_refused(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"{name}: is empty"):
        load_settings()


def test_a_bad_secret_is_never_shown(monkeypatch):
    monkeypatch.setenv("AO_SPARK_TOKEN", "Zq9;leaky-token-value")
    with pytest.raises(ConfigError, match="AO_SPARK_TOKEN") as excinfo:
        load_settings()
    assert "leaky" not in str(excinfo.value)


def test_a_bad_url_is_shown_without_its_password(monkeypatch):
    monkeypatch.setenv("AO_REDIS_URL", "redis://:Hunter2Hunter2@redis:port/0")
    with pytest.raises(ConfigError, match="AO_REDIS_URL") as excinfo:
        load_settings()
    assert "Hunter2" not in str(excinfo.value) and "redis://:***@redis:port/0" in str(excinfo.value)


def test_secrets_stay_out_of_reprs_and_are_remembered_for_redaction():
    from autooptimize.redact import redact

    s = Settings(flower_password="fl0wer-Pw-7781", spark_token="tok-88-Xy-221",
                 redis_url="redis://:r3dis-Pw-5512@h:6379/0")
    assert "fl0wer-Pw-7781" not in repr(s) and "tok-88-Xy-221" not in repr(s)
    assert s.secret_values() == ["r3dis-Pw-5512", "tok-88-Xy-221", "fl0wer-Pw-7781"]
    shown = redact("auth failed: r3dis-Pw-5512 / tok-88-Xy-221 / fl0wer-Pw-7781")
    assert shown == "auth failed: *** / *** / ***"


def test_priority_classes_map_to_queues_and_celery_priorities():
    classes = ("high", "normal", "low")
    assert [actor_queue(c) for c in classes] == ["ao.actor.high", "ao.actor.normal", "ao.actor.low"]
    priorities = [task_priority(c, classes) for c in classes]
    assert priorities == sorted(priorities) and priorities[0] == 0 and all(0 <= p <= 9 for p in priorities)


def test_priority_classes_from_the_environment(monkeypatch):
    monkeypatch.setenv("AO_PRIORITY_CLASSES", "urgent, batch")
    assert load_settings().priority_classes == ("urgent", "batch")


def test_large_partition_settings(monkeypatch):
    monkeypatch.setenv("AO_MAX_GROUP_BYTES", "4GiB")
    monkeypatch.setenv("AO_REWRITE_CONCURRENCY", "3")
    s = load_settings()
    assert (s.max_group_bytes, s.rewrite_concurrency) == (4 * 1024**3, 3)
    monkeypatch.setenv("AO_REWRITE_CONCURRENCY", "0")
    with pytest.raises(ConfigError, match="AO_REWRITE_CONCURRENCY"):
        load_settings()


@pytest.mark.parametrize(("env", "argv", "expected"), [
    (None, [], 0.2), ("0.5", [], 0.5), ("0.5", ["--interval", "3"], 3.0)])
def test_the_listener_pauses_for_its_setting_unless_the_command_line_says_otherwise(monkeypatch, env, argv, expected):
    import scheduler.listener
    from autooptimize.cli import up
    from autooptimize.cli.parser import build_parser
    from autooptimize.config import get_settings

    if env is None:
        monkeypatch.delenv("AO_LISTENER_INTERVAL_SECONDS", raising=False)
    else:
        monkeypatch.setenv("AO_LISTENER_INTERVAL_SECONDS", env)
    get_settings.cache_clear()  # the command reads the environment as it is now
    monkeypatch.setattr(up, "decide_requester", lambda settings: None)
    # the listener's own entry point runs, up to its loop: no schema check, signal handlers or loop here
    monkeypatch.setattr(scheduler.listener, "service_settings", lambda prog, verbose: get_settings())
    monkeypatch.setattr(scheduler.listener, "stop_on_signals", lambda log: threading.Event())
    seen: list[float] = []
    monkeypatch.setattr(scheduler.listener, "run_listener", lambda settings, stop, interval, *a, **k: seen.append(interval))
    args = build_parser().parse_args(["listener", *argv])
    try:
        assert args.func(args) == 0
    finally:
        get_settings.cache_clear()
    assert seen == [expected]
