"""Commands that run the service's processes: db, worker, up, listener, dispatcher, beat, flower, spark; and
``up``'s supervision of its children."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autooptimize.cli.common import current_settings
from autooptimize.cli.runtime import flower_credentials, worker_argv
from autooptimize.config import Settings
from autooptimize.console.auth import console_credentials
from autooptimize.errors import InvalidArgument
from autooptimize.processes import (
    STOP_GRACE_SECONDS,
    Stopped,
    StopSignals,
    kill_group,
    spawn,
    stop_processes,
    stop_signals,
)
from autooptimize.storage.db import upgrade
from spark_actors import server
from tasks.routing import CONTROL_QUEUE, all_queue_names
from tasks.send import CeleryDispatch, decide_requester, send_scan


def cmd_db(args: argparse.Namespace) -> int:
    settings = current_settings()
    upgrade(settings, args.revision)  # an unknown revision: InvalidArgument before anything is touched
    print(f"database {settings.database_url} is at revision {args.revision}")  # printed redacted
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from tasks.app import app

    app.worker_main(worker_argv(current_settings(), queues=args.queues, concurrency=args.concurrency,
                                loglevel=args.loglevel, name=args.name))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    return run_service(current_settings(), workers=args.workers, flower=not args.no_flower, beat=not args.no_beat,
                       console=not args.no_console)


def cmd_listener(args: argparse.Namespace) -> int:
    from autooptimize.services.submit_decided import on_attention_handler
    from scheduler.listener import main as listener_main

    settings = current_settings()
    argv = (["--interval", str(args.interval)] if args.interval is not None else []) + [
        "--workers", str(args.workers)] + (["--once"] if args.once else [])
    if settings.decide_inline:  # the listener plans and decides itself, and scans (before issue 26)
        return listener_main(argv, on_attention=on_attention_handler(settings, CeleryDispatch(settings)))
    # observing stays in the listener; decisions and whole scans are control-queue tasks
    return listener_main(argv, on_attention=decide_requester(settings),
                         scan=lambda tables: send_scan(settings, tables))


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from scheduler.dispatcher import main as dispatcher_main

    return int(dispatcher_main(["--rebuild-only"] if args.rebuild_only else []) or 0)


def cmd_beat(args: argparse.Namespace) -> int:
    from scheduler.beat import app

    settings = current_settings()
    app.start(["beat", "-s", str(settings.home_dir / "celerybeat-schedule"), "--loglevel", args.loglevel])
    return 0


def cmd_flower(args: argparse.Namespace) -> int:
    from tasks.app import app

    settings = current_settings()
    user, password, path = flower_credentials(settings)
    os.environ["FLOWER_BASIC_AUTH"] = f"{user}:{password}"  # not on the command line, never logged
    where = f"password in {path}" if path else "password from AO_FLOWER_PASSWORD"
    print(f"Flower on {settings.flower_address}:{settings.flower_port} (user {user!r}, {where})", flush=True)
    app.start(["flower", f"--address={settings.flower_address}", f"--port={settings.flower_port}"])
    return 0


def cmd_spark(args: argparse.Namespace) -> int:
    settings = current_settings()
    if args.spark_command == "serve":
        server.serve_foreground(settings)
        return 0
    if args.spark_command in ("master", "worker"):
        server.serve_standalone(settings, args.spark_command)
        return 0
    if args.spark_command == "start":
        info = server.ensure_local_server(settings)
        print(f"Spark Connect server on 127.0.0.1:{info.port} (pid {info.pid}); token in {settings.home_dir}/spark")
    elif args.spark_command == "stop":
        print("stopped" if server.stop_local_server(settings) else "no server was running")
    else:
        running = server.running_server(settings)
        print(f"running on 127.0.0.1:{running.port} (pid {running.pid})" if running else "not running")
    return 0


# --- up ------------------------------------------------------------------------------------------------

QUICK_EXIT_SECONDS = 30.0  # a child that exits sooner than this after (re)starting counts towards a crash loop
CRASH_LOOP_EXITS = 5  # that many quick exits in a row: the service stops (a bad setting, not bad luck)
MAX_RESTART_DELAY = 30.0


@dataclass
class _Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None
    proc: subprocess.Popen[bytes]
    started: float
    quick_exits: int = 0
    restart_at: float | None = None


class Supervisor:
    """``up``'s children: each in its own process group; one that exits (a crash, a kill -9) loses whatever it
    left in its group and is started again, at once after a long life, else after a doubling delay; all
    stopped together within ``grace`` seconds and a few more."""

    def __init__(self, logs: Path, stop: StopSignals) -> None:
        self.logs = logs
        self.stop = stop
        self.children: list[_Child] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with self.stop.held():  # a signal now is handled once the child is on the list
            self.children.append(_Child(name, argv, env, spawn(argv, self.logs / f"{name}.log", env),
                                        time.monotonic()))

    def _restart(self, child: _Child) -> None:
        with self.stop.held():
            child.proc = spawn(child.argv, self.logs / f"{child.name}.log", child.env)
            child.started, child.restart_at = time.monotonic(), None

    def check(self) -> str | None:
        """Restart what exited; the reason to stop the service when a child is in a crash loop, else None."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._restart(child)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            kill_group(child.proc.pid)  # its orphans (a worker's pool) would run on beside the new one
            quick = now - child.started < QUICK_EXIT_SECONDS
            child.quick_exits = child.quick_exits + 1 if quick else 0
            if child.quick_exits >= CRASH_LOOP_EXITS:
                return (f"{child.name} exited {child.quick_exits} times in a row within {QUICK_EXIT_SECONDS:.0f} s "
                        f"of starting (last with {code}); stopping the service")
            delay = min(MAX_RESTART_DELAY, 2.0 ** (child.quick_exits - 1)) if quick else 0.0
            print(f"{child.name} exited with {code}; restarting it{f' in {delay:.0f} s' if delay else ''}",
                  file=sys.stderr, flush=True)
            child.restart_at = now + delay
        return None

    def stop_all(self, grace: float) -> list[str]:
        """Stop every child (see autooptimize/processes.py); the names of those that had to be killed."""
        procs = [c.proc for c in self.children]
        killed = set(stop_processes(procs, grace, self.stop.forced))
        return [c.name for c in self.children if c.proc.pid in killed]


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "tasks.app", *args]


def _start_children(children: Supervisor, settings: Settings, workers: int, flower: bool, beat: bool,
                    console: bool = True) -> None:
    # actors take the rewrites and consolidations; scans and decisions have a worker of their own, so a
    # backlog of merges never delays noticing the next commit (nor a scan a merge slot)
    actor_queues = ",".join(q for q in all_queue_names(settings.priority_classes) if q != CONTROL_QUEUE)
    for i in range(workers):
        children.start(f"worker-{i}", _celery(*worker_argv(settings, queues=actor_queues, name=f"actor{i}@%h")))
    # decisions and scans are short and mostly wait on PostgreSQL and files: threads in one process, not a
    # pool of forked processes that costs a round of IPC per task (and a process's memory per slot)
    children.start("control", _celery(*worker_argv(settings, queues=CONTROL_QUEUE,
                                                   concurrency=settings.control_concurrency,
                                                   name="control@%h", pool="threads")))
    children.start("listener", [sys.executable, "-m", "autooptimize.cli", "listener"])
    if settings.dispatch == "rpq":
        children.start("dispatcher", [sys.executable, "-m", "autooptimize.cli", "dispatcher"])
    if beat:
        children.start("beat", [sys.executable, "-m", "autooptimize.cli", "beat", "--loglevel", "INFO"])
    if flower:
        user, password, path = flower_credentials(settings)
        # FLOWER_BASIC_AUTH keeps the password off the command line (ps) and out of the logs.
        children.start("flower", _celery("flower", f"--address={settings.flower_address}",
                                         f"--port={settings.flower_port}"),
                       {**os.environ, "FLOWER_BASIC_AUTH": f"{user}:{password}"})
        where = f"password in {path}" if path else "password from AO_FLOWER_PASSWORD"
        print(f"Flower: http://{settings.flower_address}:{settings.flower_port} (user {user!r}, {where})")
    if console:  # the web console and /metrics (autooptimize.console); its password stays in AO_HOME

        console_user, _, console_path = console_credentials(settings)
        children.start("console", [sys.executable, "-m", "autooptimize.cli", "console"])
        where = f"password in {console_path}" if console_path else "password from AO_CONSOLE_PASSWORD"
        print(f"Console: http://{settings.console_address}:{settings.console_port} (user {console_user!r}, {where})")


def run_service(settings: Settings, *, workers: int = 1, flower: bool = True, beat: bool = True,
                console: bool = True, grace: float = STOP_GRACE_SECONDS) -> int:
    """Run workers, listener, dispatcher, beat and Flower (and the local Spark Connect server unless one is
    running) until SIGTERM or Ctrl-C, restarting a child that exits; then stop all of it within ``grace``
    seconds and a few more, the Spark server last and only if this run started it. From the first
    line on a signal stops whatever has started so far. Returns 0 when stopped by a signal, 1 when a
    child kept crashing."""
    if workers < 1:
        raise InvalidArgument(f"--workers must be ≥ 1 (got {workers})")
    logs = settings.home_dir / "logs"
    with stop_signals() as stop:
        try:
            upgrade(settings)
            with server.local_server_while(settings):
                children = Supervisor(logs, stop)
                try:
                    _start_children(children, settings, workers, flower, beat, console)
                    print(f"autooptimize is up: {', '.join(c.name for c in children.children)}; logs in {logs}. "
                          "Ctrl-C stops it.", flush=True)
                    while (why := children.check()) is None:
                        time.sleep(0.5)
                    stop.disarm()
                    print(why, file=sys.stderr, flush=True)
                    return 1
                finally:
                    stop.disarm()
                    killed = children.stop_all(grace)
                    if killed:
                        print(f"killed after {grace:.0f} s: {', '.join(killed)}", file=sys.stderr, flush=True)
        except Stopped:
            return 0
        finally:
            print("autooptimize stopped", flush=True)
