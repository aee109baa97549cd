"""Settings: parsing, validation messages that name the variable, and redaction."""

from __future__ import annotations

import pytest

from autooptimize.config import MiB, Settings, load_settings, parse_size, redact_url
from autooptimize.errors import ConfigError
from tasks.routing import actor_queue, task_priority


@pytest.mark.parametrize(
    ("text", "expected"),
    [("134217728", 134217728), ("128MiB", 128 * MiB), ("64MB", 64 * MiB), ("1.5GiB", 1536 * MiB),
     ("512KiB", 512 * 1024), ("2 G", 2048 * MiB), (4096, 4096)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "12XB", "", "MiB", "1..2MiB"])
def test_parse_size_rejects_nonsense_naming_the_value(text):
    with pytest.raises(ConfigError, match="64MiB"):
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
     ("AO_PRIORITY_CLASSES", "High,,", "lower-case"), ("AO_SPARK_PORT", "x", "integer"), ("AO_WORKER_CONCURRENCY", "0", "greater than")],
)
def test_invalid_settings_name_the_variable(monkeypatch, name, value, needle):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as excinfo:
        load_settings()
    assert name in str(excinfo.value) and needle in str(excinfo.value)


def test_postgres_url_forms_are_normalised(monkeypatch):
    monkeypatch.setenv("AO_DATABASE_URL", "postgres://u@h:5432/db")
    assert load_settings().database_url == "postgresql+psycopg2://u@h:5432/db"


def test_redaction_masks_passwords_and_tokens():
    assert redact_url("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    assert redact_url("sc://h:15002/;token=abc;use_ssl=true") == "sc://h:15002/;token=***;use_ssl=true"
    assert "secret" not in repr(Settings(flower_password="secret"))


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
