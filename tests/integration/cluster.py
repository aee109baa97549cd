"""A real Spark standalone cluster on 127.0.0.1 for the tests marked ``cluster``: a master and two workers
(one core and 1 GiB each), and a Spark Connect server whose master is that cluster (spark_actors/server.py
with AO_SPARK_MASTER). The pyspark wheel ships ``sbin/spark-daemon.sh`` but not ``start-master.sh`` and
``start-worker.sh``; those two scripts only run ``spark-daemon.sh start`` with the Master and Worker classes
(in spark-core, which the wheel has), so this does exactly that.

The executors are separate JVMs with their own Python workers, run by the base interpreter (not this
virtualenv's) with PYTHONPATH naming the virtualenv's site-packages: the third-party libraries are there,
but the editable install of this package is a ``.pth`` file, which Python does not process from
PYTHONPATH. So ``import autooptimize`` works on an executor only when the session's artifact
(spark_actors/artifacts.py) has arrived, which is the route docs/engines.md documents.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from spark_actors.java import with_java
from tests.helpers import free_port


def base_python() -> str:
    """The interpreter this virtualenv was made from (it has none of the virtualenv's packages)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


@dataclass
class StandaloneCluster:
    home: Path
    master_url: str = ""
    master_web: int = 0
    env: dict[str, str] | None = None

    def start(self, workers: int = 2) -> StandaloneCluster:
        from pyspark.find_spark_home import _find_spark_home

        spark_home = Path(os.environ.get("SPARK_HOME") or _find_spark_home())
        self.home.mkdir(parents=True, exist_ok=True)
        port, self.master_web = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
        env.update(
            SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1",
            SPARK_MASTER_PORT=str(port), SPARK_MASTER_WEBUI_PORT=str(self.master_web),
            SPARK_WORKER_INSTANCES=str(workers), SPARK_WORKER_CORES="1", SPARK_WORKER_MEMORY="1g",
            SPARK_WORKER_PORT=str(free_port()), SPARK_WORKER_WEBUI_PORT=str(free_port()),
            SPARK_WORKER_DIR=str(self.home / "work"), SPARK_PID_DIR=str(self.home / "pids"),
            SPARK_LOG_DIR=str(self.home / "logs"), SPARK_IDENT_STRING="ao-cluster-test",
            # executors: the base interpreter, the virtualenv's libraries, none of our code
            PYSPARK_PYTHON=base_python(), PYTHONPATH=site_packages(),
            SPARK_DAEMON_MEMORY="256m",
        )
        self.env = with_java(env, self.home / "java")
        daemon = spark_home / "sbin" / "spark-daemon.sh"
        # what sbin/start-master.sh runs
        self._run(daemon, "start", "org.apache.spark.deploy.master.Master", "1", "--host", "127.0.0.1",
                  "--port", str(port), "--webui-port", str(self.master_web))
        self._wait_listening(port)
        # what sbin/start-worker.sh runs for each of SPARK_WORKER_INSTANCES
        for instance in range(1, workers + 1):
            self._run(daemon, "start", "org.apache.spark.deploy.worker.Worker", str(instance),
                      "--webui-port", str(free_port()), "--port", str(free_port()), "--cores", "1",
                      "--memory", "1g", "--work-dir", str(self.home / "work" / str(instance)), self.master_url)
        self.wait_workers(workers)
        return self

    def _run(self, script: Path, *args: str) -> None:
        assert self.env is not None
        out = subprocess.run([str(script), *args], env=self.env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{script.name} failed: {out.stderr[-2000:] or out.stdout[-2000:]}")

    @staticmethod
    def _wait_listening(port: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")

    def wait_workers(self, count: int, timeout: float = 90.0) -> None:
        import json
        import urllib.request

        deadline = time.monotonic() + timeout
        alive = 0
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.master_web}/json/", timeout=5) as r:
                    state = json.load(r)
                alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
                if alive >= count:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{alive} of {count} Spark workers registered with {self.master_url}")

    def executor_pids(self) -> list[int]:
        """Pids of the executor JVMs (CoarseGrainedExecutorBackend) this cluster's workers started."""
        work = str(self.home / "work")
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (b"CoarseGrainedExecutorBackend" in (entry / "cmdline").read_bytes()
                        and os.readlink(entry / "cwd").startswith(work)):
                    pids.append(int(entry.name))
        return pids

    def stop(self) -> None:
        """Stop the workers and the master (their scripts, then SIGKILL of whatever pid files remain)."""
        if self.env is None:
            return
        for pid_file in (self.home / "pids").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        for pid in self.executor_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class ConnectServer:
    """A Spark Connect server whose master is the cluster (started like the service's local server)."""

    directory: Path
    info: object = None

    def start(self, settings: object) -> ConnectServer:
        from spark_actors.server import _start

        self.directory.mkdir(parents=True, exist_ok=True)
        self.info = _start(settings, self.directory)  # type: ignore[arg-type]
        return self

    def pid(self) -> int:
        return int(self.info.pid)  # type: ignore[attr-defined]

    def stop(self) -> None:
        import json

        with contextlib.suppress(OSError, ValueError, KeyError):
            record = json.loads((self.directory / "server.json").read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(record["pid"]), signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(record["group"]), signal.SIGKILL)


def session_for(remote: str) -> object:
    """A Spark Connect session on ``remote`` with the service's runtime confs (not the process's shared one)."""
    from pyspark.sql import SparkSession

    from spark_actors.session import RUNTIME_CONFS, _bound_retries

    session = SparkSession.builder.remote(remote).create()
    _bound_retries(session)
    for key, value in RUNTIME_CONFS.items():
        session.conf.set(key, value)
    return session
