"""Iceberg's Java library (1.10.2 on Spark 3.5) as a second engine in the tests: it writes input tables
the way most lakes get them (merge-on-read DELETE and UPDATE, v2 and v3, evolution) and reads the
service's results back.

One driver process (tests/java/driver.py, run by the virtualenv scripts/iceberg_java.sh builds) serves
the whole test session; its JdbcCatalog keeps tables in the service's PostgreSQL database under the
service's catalog name and warehouse, so pyiceberg's SqlCatalog sees the same tables.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "java" / "driver.py"
POSTGRES_JAR = "/usr/share/java/postgresql.jar"


def java_venv() -> Path:
    return Path(os.environ.get("AO_ICEBERG_JAVA_VENV", REPO / ".iceberg-java"))


def ensure_installed() -> Path:
    """The Java engine's python (installing it with scripts/iceberg_java.sh when missing)."""
    python = java_venv() / "bin" / "python"
    if not python.exists() or not Path(POSTGRES_JAR).exists():
        subprocess.run(["bash", str(REPO / "scripts" / "iceberg_java.sh")], check=True)
    return python


def runtime_jar(venv: Path) -> str:
    found = sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "**" / "iceberg-spark-runtime-3.5_2.12-*.jar"),
                         recursive=True))
    if not found:
        raise RuntimeError(f"no iceberg-spark-runtime-3.5 jar under {venv}; run scripts/iceberg_java.sh")
    return found[0]


def jdbc_url(database_url: str) -> str:
    """postgresql+psycopg2://user@host:port/db → jdbc:postgresql://host:port/db (user given apart)."""
    rest = database_url.split("://", 1)[1]
    hostpart = rest.split("@", 1)[-1]
    return f"jdbc:postgresql://{hostpart}"


class JavaEngine:
    """The running driver: ``run(sql..., query=...)`` returns the query's rows (dicts)."""

    def __init__(self, python: Path, catalog: str, database_url: str, warehouse: str, log: Path) -> None:
        config = {"catalog": catalog, "jdbc_url": jdbc_url(database_url), "warehouse": warehouse,
                  "jars": [runtime_jar(python.parent.parent), POSTGRES_JAR]}
        user = database_url.split("://", 1)[1].split("@", 1)[0] if "@" in database_url else "postgres"
        config["user"] = user.split(":", 1)[0]
        self.catalog = catalog
        self._log = open(log, "ab")  # noqa: SIM115 - kept for the process's life
        started = time.monotonic()
        self._process = subprocess.Popen(
            [str(python), str(DRIVER), json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True, env=_environment(python),
        )
        ready = self._process.stdout.readline() if self._process.stdout else ""
        if not ready.strip():
            raise RuntimeError(f"the Iceberg Java driver did not start; see {log}")
        self.startup_seconds = time.monotonic() - started

    def run(self, *sql: str, query: str | None = None) -> list[dict[str, Any]] | None:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps({"sql": list(sql), "query": query}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the Iceberg Java driver died")
        answer = json.loads(line)
        if "error" in answer:
            raise JavaError(answer["error"], answer.get("trace", ""))
        return answer["rows"]

    def rows(self, query: str) -> list[dict[str, Any]]:
        found = self.run(query=query)
        assert found is not None
        return found

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def _environment(python: Path) -> dict[str, str]:
    """This process's environment without what points Spark at the service's own pyspark 4."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "AO_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYSPARK_PYTHON"] = str(python)
    return env


class JavaError(Exception):
    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self.trace = trace


def content(rows: list[dict[str, Any]], columns: list[str] | None = None) -> tuple[int, str]:
    """Row count and an order-independent checksum of ``rows`` (as JSON, over ``columns`` if given)."""
    digests = sorted(hashlib.sha256(json.dumps({k: r[k] for k in (columns or sorted(r))}, sort_keys=True,
                                               default=str).encode()).hexdigest() for r in rows)
    return len(rows), hashlib.sha256("".join(digests).encode()).hexdigest()
