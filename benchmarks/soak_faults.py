"""The soak's fault injector: on a schedule, one fault at a time, each kind in turn (shuffled per round).

Kinds, and what each touches:

- ``workers``      kill -9 of a Celery worker's whole process group (as a lost machine), or of one pool
                   process (as the OOM killer); waits up to 10 s for an action or a batch in flight first
- ``listener``     kill -9 of the listener's process group
- ``spark``        kill -9 of the Spark Connect server, then a new one is started (as ``autooptimize spark
                   start`` would) unless a worker did it first
- ``redis-flushdb`` FLUSHDB of the soak's own Redis db and every connection using that db dropped: what a
                   restart of a Redis without persistence does, confined to this db
- ``postgres-connections`` every connection to the soak's own database terminated (pg_terminate_backend):
                   what a restart does to clients, confined to this database
- ``redis-restart`` a real restart of the Redis server (``--redis-restart-cmd``): every db and client
- ``postgres``     a real restart of the PostgreSQL server (``--postgres-restart-cmd``): every database

The first five disturb nothing outside the soak; the last two disturb everyone on the server.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from sqlalchemy import text
from sqlalchemy.engine import Engine

from benchmarks.soak_service import Service, children_of

FAULT_KINDS = ("workers", "listener", "spark", "redis-flushdb", "postgres-connections", "redis-restart", "postgres")
LOCAL_KINDS = FAULT_KINDS[:5]  # confined to the soak's own processes, Redis db and database
DEFAULT_REDIS_RESTART = ("redis-cli -p 6379 shutdown nosave; redis-server --daemonize yes --bind 127.0.0.1 -::1 "
                         "--port 6379 --save '' --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log")
DEFAULT_POSTGRES_RESTART = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart"


@dataclass(frozen=True)
class Fault:
    at: float  # seconds since the ingest started
    kind: str
    detail: str
    injected: bool  # False: nothing to hit at that moment (e.g. the worker was being restarted)


class FaultInjector(threading.Thread):
    def __init__(self, kinds: list[str], every: float, seed: int, t0: float, service: Service, engine: Engine,
                 admin: Engine, db_name: str, redis_url: str, restart_spark: Callable[[], int | None],
                 commands: dict[str, str], stop: threading.Event) -> None:
        super().__init__(name="faults", daemon=True)
        self.kinds, self.every, self.rng, self.t0 = kinds, every, random.Random(seed), t0
        self.service, self.engine, self.admin, self.db_name = service, engine, admin, db_name
        self.redis_url, self.restart_spark, self.commands, self.stop_event = redis_url, restart_spark, commands, stop
        self.faults: list[Fault] = []
        self.notes: list[str] = []  # what happened after a fault (a restart's outcome)

    def run(self) -> None:
        round_: list[str] = []
        last = ""
        due = time.monotonic() + self.every * self.rng.uniform(0.5, 1.0)
        while not self.stop_event.wait(max(0.0, due - time.monotonic())):
            if not round_:
                round_ = self.rng.sample(self.kinds, len(self.kinds))
                if len(round_) > 1 and round_[-1] == last:  # no kind twice in a row across rounds
                    round_[0], round_[-1] = round_[-1], round_[0]
            kind = last = round_.pop()
            at = time.monotonic() - self.t0
            try:
                detail, injected = getattr(self, "_" + kind.replace("-", "_"))()
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported, not fatal
                detail, injected = f"could not inject: {type(exc).__name__}: {exc}", False
            self.faults.append(Fault(round(at, 1), kind, detail, injected))
            # keep the pace after a slow fault, without a burst to catch up
            due = max(due + self.every * self.rng.uniform(0.7, 1.3), time.monotonic() + self.every / 3)

    # --- the kinds --------------------------------------------------------------------------------------

    def _in_flight(self, wait: float) -> str:
        """Wait up to ``wait`` s for an action running or a batch not yet committed; what was in flight."""
        deadline = time.monotonic() + wait
        while True:
            with contextlib.suppress(Exception):
                with self.engine.connect() as conn:
                    row = conn.execute(text(
                        "SELECT kind || ' ' || left(id, 8) FROM ao_actions WHERE state = 'running' UNION ALL "
                        "SELECT 'batch ' || left(id, 8) || ' (' || state || ')' FROM ao_buffer_batches "
                        "WHERE state IN ('claimed', 'written') LIMIT 1")).first()
                if row:
                    return f" during {row[0]}"
            if time.monotonic() >= deadline or self.stop_event.is_set():
                return " (nothing in flight)"
            time.sleep(0.5)

    def _workers(self) -> tuple[str, bool]:
        during = self._in_flight(10.0)
        workers = self.service.roles().get("worker", [])
        if not workers:
            return "no worker running (being restarted)", False
        target = self.rng.choice(workers)
        pool = list(children_of(target))
        if pool and self.rng.random() < 0.4:
            victim = self.rng.choice(pool)
            os.kill(victim, signal.SIGKILL)
            return f"kill -9 pool process {victim} of worker {target}{during}", True
        size = len(pool) + 1
        os.killpg(target, signal.SIGKILL)
        return f"kill -9 worker group {target} ({size} processes){during}", True

    def _listener(self) -> tuple[str, bool]:
        listeners = self.service.roles().get("listener", [])
        if not listeners:
            return "no listener running (being restarted)", False
        os.killpg(listeners[0], signal.SIGKILL)
        return f"kill -9 listener group {listeners[0]}", True

    def _spark(self) -> tuple[str, bool]:
        during = self._in_flight(10.0)
        pid = self.service.spark_pid()
        if pid is None:
            return "no Spark Connect server running", False
        os.kill(pid, signal.SIGKILL)
        # started again beside the schedule (it takes tens of seconds on a busy machine); a worker that needs
        # a session first starts it itself, and this start then finds it running
        threading.Thread(target=self._restart_spark, args=(len(self.faults),), daemon=True).start()
        return f"kill -9 Spark Connect server {pid}{during}", True

    def _restart_spark(self, index: int) -> None:
        time.sleep(1.0)
        started = time.monotonic()
        pid = self.restart_spark()
        self.notes.append(f"Spark server killed by fault #{index + 1} running again as {pid} "
                          f"{time.monotonic() - started:.0f} s later")

    def _redis_flushdb(self) -> tuple[str, bool]:
        client = redis.Redis.from_url(self.redis_url)
        try:
            db = int(client.connection_pool.connection_kwargs.get("db", 0))
            keys = int(client.dbsize())
            client.flushdb()
            me = int(client.client_id())
            dropped = 0
            for c in client.client_list():
                if int(c.get("db", -1)) == db and int(c["id"]) != me:
                    with contextlib.suppress(redis.RedisError):
                        dropped += int(client.client_kill_filter(_id=c["id"]))
            return f"FLUSHDB of db {db} ({keys} keys), {dropped} connection(s) on db {db} dropped", True
        finally:
            client.close()

    def _postgres_connections(self) -> tuple[str, bool]:
        with self.admin.connect() as conn:
            killed = conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": self.db_name}).scalar()
        return f"terminated {killed} connection(s) to database {self.db_name}", True

    def _run_restart(self, name: str, ready: Callable[[], bool]) -> tuple[str, bool]:
        started = time.monotonic()
        done = subprocess.run(self.commands[name], shell=True, capture_output=True, text=True, timeout=120)
        while not ready() and time.monotonic() - started < 120:
            time.sleep(0.5)
        up = ready()
        return (f"`{self.commands[name]}` exited {done.returncode}; "
                f"{'back' if up else 'NOT back'} after {time.monotonic() - started:.1f} s", up)

    def _redis_restart(self) -> tuple[str, bool]:
        def ready() -> bool:
            with contextlib.suppress(redis.RedisError), redis.Redis.from_url(self.redis_url) as client:
                return bool(client.ping())
            return False

        return self._run_restart("redis-restart", ready)

    def _postgres(self) -> tuple[str, bool]:
        def ready() -> bool:
            with contextlib.suppress(Exception), self.admin.connect() as conn:
                conn.execute(text("SELECT 1"))
                return True
            return False

        return self._run_restart("postgres", ready)
