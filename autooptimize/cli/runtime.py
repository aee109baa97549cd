"""Running the service on one machine: workers, listener, dispatcher, beat and Flower as child processes,
stopped together (``autooptimize up``), and the worker's and Flower's arguments."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from tasks.routing import all_queue_names


def worker_argv(settings: Settings, *, queues: str | None = None, concurrency: int | None = None,
                loglevel: str = "INFO", name: str | None = None) -> list[str]:
    """Celery worker arguments for ``queues`` (comma-separated; default every queue); InvalidArgument
    names an unknown queue and the valid ones."""
    valid = all_queue_names(settings.priority_classes)
    chosen = [q.strip() for q in queues.split(",")] if queues else valid
    bad = [q for q in chosen if q not in valid]
    if bad:
        raise InvalidArgument(f"unknown queue(s) {', '.join(bad)}; valid: {', '.join(valid)}")
    argv = ["worker", "-Q", ",".join(chosen), "-c", str(concurrency or settings.worker_concurrency),
            "--loglevel", loglevel, "-E"]
    if name:
        argv += ["-n", name]
    return argv


def flower_credentials(settings: Settings) -> tuple[str, str, Path | None]:
    """User and password for Flower's basic auth: from AO_FLOWER_* or generated once into AO_HOME."""
    if settings.flower_password is not None:
        return settings.flower_user, settings.flower_password.get_secret_value(), None
    path = settings.home_dir / "flower-credentials"
    if path.exists():
        user, _, password = path.read_text().strip().partition(":")
        return user, password, path
    password = secrets.token_urlsafe(18)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{settings.flower_user}:{password}\n")
    return settings.flower_user, password, path


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "tasks.app", *args]


def run_service(settings: Settings, *, workers: int = 1, flower: bool = True, beat: bool = True,
                console: bool = True) -> int:
    """Start everything, wait, and stop it all on Ctrl-C or SIGTERM. Returns an exit code."""
    from autooptimize.storage.db import upgrade
    from spark_actors import server

    if workers < 1:
        raise InvalidArgument(f"--workers must be ≥ 1 (got {workers})")
    upgrade(settings)
    started_spark = False
    if settings.spark_remote == "local" and server.running_server(settings) is None:
        server.ensure_local_server(settings)
        started_spark = True
    logs = settings.home_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        out = open(logs / f"{name}.log", "ab")
        procs.append((name, subprocess.Popen(argv, env={**env, **(extra_env or {})}, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)))

    for i in range(workers):
        spawn(f"worker-{i}", _celery(*worker_argv(settings, name=f"actor{i}@%h")))
    spawn("listener", [sys.executable, "-m", "autooptimize.cli", "listener"])
    if settings.dispatch == "rpq":
        spawn("dispatcher", [sys.executable, "-m", "autooptimize.cli", "dispatcher"])
    if beat:
        spawn("beat", [sys.executable, "-m", "autooptimize.cli", "beat", "--loglevel", "INFO"])  # scheduler.beat
    if flower:
        user, password, path = flower_credentials(settings)
        # FLOWER_BASIC_AUTH keeps the password off the command line (ps) and out of the logs.
        spawn("flower", _celery("flower", f"--address={settings.flower_address}", f"--port={settings.flower_port}"),
              {"FLOWER_BASIC_AUTH": f"{user}:{password}"})
        where = f"password in {path}" if path else "password from AO_FLOWER_PASSWORD"
        print(f"Flower: http://{settings.flower_address}:{settings.flower_port} (user {user!r}, {where})")
    if console:  # the web console and /metrics (autooptimize.console); its password stays in AO_HOME
        from autooptimize.console.auth import console_credentials

        user, _, path = console_credentials(settings)
        spawn("console", [sys.executable, "-m", "autooptimize.cli", "console"])
        where = f"password in {path}" if path else "password from AO_CONSOLE_PASSWORD"
        print(f"Console: http://{settings.console_address}:{settings.console_port} (user {user!r}, {where})")
    print(f"autooptimize is up: {', '.join(n for n, _ in procs)}; logs in {logs}. Ctrl-C stops it.", flush=True)

    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        while not stopping:
            for name, proc in procs:
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; stopping the service", file=sys.stderr)
                    stopping, code = True, 1
            time.sleep(0.5)
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for _, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if started_spark:
            server.stop_local_server(settings)
        print("autooptimize stopped", flush=True)
    return code
