"""The whole service (``autooptimize up``) against N tracked tables, W of them written concurrently.

    python -m benchmarks.scale --tables 1000 --writers 100 --rate 5 [--minutes 2] [--idle-seconds 30] [--json]

Creates a throw-away PostgreSQL database and warehouse and ``--tables`` small tables in the built-in SQL
catalog, directly (one metadata file each, written in parallel, and one bulk insert into the catalog's
table list: no data), then runs ``autooptimize up`` with ``AO_AUTO_TRACK=scale.*`` twice over the same
tables: first as it is now (the listener observes; decide and scan are control-queue tasks), then with
``AO_DECIDE_INLINE=true``, the single listener that decides and scans in its own process (the baseline).
In each run ``--writers`` threads commit tiny appends to ``--writers`` of the tables (one each) at an
aggregate ``--rate`` for ``--minutes``. Reported, each beside the baseline as a ratio:

- time until all N tables are tracked, and until all are observed once (first run only: the second finds
  them tracked and observed);
- commit → observed: from the writer's commit returning to the entropy-history row of that snapshot;
  commit → submitted: from the last commit of a table before an action was created for it (the writes
  are tiny files into one partition per table, and AO_MERGE_FAN_IN=4, so that the live-partition policy
  merges every four commits or so; before the phase the i-th written table gets i mod 4 files, so that
  the tables reach their fourth file at different times) to that action row; p50, p95, max, and
  commits never observed;
- control-plane CPU: utime + stime of the listener, dispatcher, beat and control-queue worker processes
  (with their pool children), per 1,000 commits, as cores over the measured phase, and per hour per 1,000
  idle tables over ``--idle-seconds`` without writes. Not counted: the actor workers doing the merges,
  the writers (this process), PostgreSQL, Redis;
- PostgreSQL rows and bytes added per 1,000 commits (ao_* tables), and what the retention job leaves of
  them once the history is past its full-resolution window;
- resident memory of the listener, dispatcher, beat and control worker.

Exits non-zero when no commit was made, a commit was never observed, or a target of issue 26 is missed:
commit → observed p95 ≤ 2 s, commit → submitted p95 ≤ 3 s, control-plane CPU ≤ 0.25 core.
Merges run with AO_REWRITE_ENGINE=local (no Spark server is started); the machine's other load counts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import redis
from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.iceberg.catalog import get_catalog
from autooptimize.services.observe.changes import changed_tables
from autooptimize.storage.db import get_engine, upgrade
from benchmarks.listener import ARROW, REPO, SCHEMA, SPEC
from benchmarks.scratch import drop_scratch_database

NAMESPACE = "scale"
DAY = dt.date(2026, 1, 1)
ROLES = ("listener", "dispatcher", "beat", "control")
TARGETS = {"observed_p95": 2.0, "submitted_p95": 3.0, "cpu_cores": 0.25}
HZ = os.sysconf("SC_CLK_TCK")


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else float("nan")


# --- tables ------------------------------------------------------------------------------------------------

def create_tables(settings: Settings, count: int) -> list[str]:
    """``count`` empty tables ``scale.t00000`` …: one metadata file each (a template's, with its own uuid and
    location), written by a few threads, and one bulk insert into the SqlCatalog's table list."""
    catalog = get_catalog(settings)
    catalog.create_namespace(NAMESPACE)
    template = catalog.create_table(f"{NAMESPACE}.template", schema=SCHEMA, partition_spec=SPEC)
    body = Path(template.metadata_location.removeprefix("file://")).read_text()
    old_uuid, old_location = str(template.metadata.table_uuid), template.location()
    catalog.drop_table(f"{NAMESPACE}.template")
    names = [f"t{i:05d}" for i in range(count)]

    def write(name: str) -> tuple[str, str]:
        table_uuid = str(uuid.uuid4())
        location = old_location.rsplit("/", 1)[0] + f"/{name}"
        path = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
        Path(path.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
        Path(path.removeprefix("file://")).write_text(body.replace(old_uuid, table_uuid).replace(old_location, location))
        return name, path

    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(write, names))
    with get_engine(settings).begin() as conn:
        conn.execute(text("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                          "VALUES (:c, :n, :t, :m)"),
                     [{"c": settings.catalog, "n": NAMESPACE, "t": t, "m": m} for t, m in rows])
    return [f"{NAMESPACE}.{t}" for t in names]


# --- the service's processes -------------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _role(pid: int) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    line = " ".join(a.decode(errors="replace") for a in argv)
    for role in ("listener", "dispatcher", "beat"):
        if f"autooptimize.cli {role}" in line:
            return role
    if "control@" in line:
        return "control"
    return "actor" if "actor" in line else None


def roles(up_pid: int) -> dict[str, list[int]]:
    """The processes of each role under ``autooptimize up`` (a Celery worker with its pool children)."""
    found: dict[str, list[int]] = {}
    for child in _children(up_pid):
        role = _role(child)
        if role is not None:
            found.setdefault(role, []).extend(_tree(child))
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / HZ


def rss_mib(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


class Service:
    """``autooptimize up`` (no Flower, no console) as a child process, its logs under AO_HOME."""

    def __init__(self, settings: Settings, env: dict[str, str]) -> None:
        self.settings = settings
        log = open(settings.home_dir / f"up-{env['AO_DECIDE_INLINE']}.log", "ab")  # noqa: SIM115 (kept open)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autooptimize.cli", "up", "--no-flower", "--no-console"],
            cwd=REPO, env={**os.environ, **env, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def roles(self) -> dict[str, list[int]]:
        return roles(self.proc.pid)

    def cpu(self) -> dict[str, float]:
        return {role: cpu_seconds(pids) for role, pids in self.roles().items()}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _control_plane(cpu: dict[str, float]) -> float:
    return sum(v for k, v in cpu.items() if k in ROLES)


# --- measuring ---------------------------------------------------------------------------------------------

def _scalar(settings: Settings, sql: str, **params: Any) -> Any:
    with get_engine(settings).connect() as conn:
        return conn.execute(text(sql), params).scalar()


def _wait(what: str, check: Any, timeout: float, every: float = 0.5) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - started


def db_usage(settings: Settings) -> dict[str, tuple[int, int]]:
    """Rows and bytes (table, indexes, TOAST) of every ao_* table."""
    with get_engine(settings).connect() as conn:
        names = [r[0] for r in conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'ao\\_%'"))]
        return {n: (int(conn.execute(text(f'SELECT count(*) FROM "{n}"')).scalar_one()),
                    int(conn.execute(text("SELECT pg_total_relation_size(:n)"), {"n": n}).scalar_one()))
                for n in names}


def _write(settings: Settings, name: str, seconds: float, rate: float, seed: int,
           commits: list[tuple[str, int, float]]) -> None:
    rng = random.Random(seed)
    table = get_catalog(settings).load_table(name)
    started = time.monotonic() + rng.random() / rate  # writers spread over the first period
    sent, next_id = 0, 1_000_000 * seed
    while True:
        wait = started + sent / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if time.monotonic() - started >= seconds:
            return
        rows = pa.table({"id": [next_id, next_id + 1], "day": [DAY, DAY], "v": ["a", "b"]}, schema=ARROW)
        table.append(rows)
        done = time.time()
        snapshot = table.current_snapshot()
        assert snapshot is not None
        commits.append((name, snapshot.snapshot_id, done))
        sent, next_id = sent + 1, next_id + 2


def seed_tables(settings: Settings, written: list[str]) -> int:
    """Give the i-th written table i mod 4 tiny files first, so that the policy's fourth file (a merge, at
    AO_MERGE_FAN_IN=4) comes at a different commit of each table, not for all of them in the same period."""
    catalog = get_catalog(settings)

    def one(item: tuple[int, str]) -> int:
        i, name = item
        table = catalog.load_table(name)
        for k in range(i % 4):
            table.append(pa.table({"id": [k], "day": [DAY], "v": ["seed"]}, schema=ARROW))
        return i % 4

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, enumerate(written)))


def _latencies(settings: Settings, commits: list[tuple[str, int, float]], since: float) -> dict[str, Any]:
    with get_engine(settings).connect() as conn:
        observed = {(r.identifier, int(r.snapshot_id)): float(r.at) for r in conn.execute(text(
            "SELECT t.identifier, h.snapshot_id, extract(epoch FROM min(h.recorded_at)) AS at "
            "FROM ao_entropy_history h JOIN ao_tracked_tables t ON t.id = h.table_id "
            "WHERE h.source = 'snapshot' AND h.recorded_at >= to_timestamp(:since) "
            "GROUP BY t.identifier, h.snapshot_id"), {"since": since})}
        actions = [(r.identifier, float(r.at)) for r in conn.execute(text(
            "SELECT t.identifier, extract(epoch FROM a.created_at) AS at FROM ao_actions a "
            "JOIN ao_tracked_tables t ON t.id = a.table_id "
            "WHERE a.trigger = 'event' AND a.created_at >= to_timestamp(:since)"), {"since": since})]
    seen = [max(0.0, observed[(n, s)] - at) for n, s, at in commits if (n, s) in observed]
    by_table: dict[str, list[float]] = {}
    for name, _, at in commits:
        by_table.setdefault(name, []).append(at)
    submitted = []
    for name, created in actions:
        before = [at for at in by_table.get(name, []) if at <= created]
        if before:
            submitted.append(created - max(before))
    return {
        "commits": len(commits),
        "missed": len(commits) - len(seen),
        "observed_p50": _percentile(seen, 0.5), "observed_p95": _percentile(seen, 0.95),
        "observed_max": max(seen, default=float("nan")),
        "actions": len(submitted),
        "submitted_p50": _percentile(submitted, 0.5), "submitted_p95": _percentile(submitted, 0.95),
        "submitted_max": max(submitted, default=float("nan")),
    }


def _drained(settings: Settings, client: redis.Redis) -> bool:
    return not changed_tables(settings) and not client.keys("ao:decide:requested:*")


def run_service(settings: Settings, names: list[str], written: list[str], *, inline: bool, minutes: float,
                rate: float, idle_seconds: float, seed: int, spark_port: int) -> dict[str, Any]:
    """One run of ``autooptimize up`` over the tables: tracking, an idle window, the writers, a drain."""
    client = redis.Redis.from_url(settings.redis_url)
    client.flushdb()  # the benchmark's own Redis database: no queue or request left from the last run
    env = {"AO_DATABASE_URL": settings.database_url, "AO_HOME": str(settings.home), "AO_REDIS_URL": settings.redis_url,
           "AO_AUTO_TRACK": f"{NAMESPACE}.*", "AO_DECIDE_INLINE": "true" if inline else "false",
           "AO_REWRITE_ENGINE": "local", "AO_SPARK_REMOTE": f"sc://127.0.0.1:{spark_port}",
           "AO_WORKER_CONCURRENCY": "1", "AO_COLD_AFTER_SECONDS": "3600", "AO_MERGE_FAN_IN": "4"}
    service = Service(settings, env)
    n = len(names)
    try:
        tracked_seconds = _wait("auto-tracking every table", lambda: _scalar(
            settings, "SELECT count(*) FROM ao_tracked_tables") >= n, 300 + n * 0.1)
        observed_seconds = _wait("observing every table once", lambda: _scalar(
            settings, "SELECT count(*) FROM ao_table_cursors WHERE target_file_size IS NOT NULL") >= n,
            300 + n * 0.2, every=1.0) + tracked_seconds
        _wait("the service's roles", lambda: set(ROLES) <= set(service.roles()), 120)
        seed_tables(settings, written)
        _wait("the seed commits to be observed and judged", lambda: _drained(settings, client), 300)
        time.sleep(20)  # start-up (the workers', beat's first round of periodic tasks) is not the idle load
        idle_before = service.cpu()
        time.sleep(idle_seconds)
        idle_after = service.cpu()
        idle = _control_plane(idle_after) - _control_plane(idle_before)
        idle_by_role = {r: round(idle_after.get(r, 0.0) - idle_before.get(r, 0.0), 2) for r in idle_after}

        usage_before = db_usage(settings)
        commits_per_writer: list[list[tuple[str, int, float]]] = [[] for _ in written]
        since = time.time()
        cpu_before, started = service.cpu(), time.monotonic()
        threads = [threading.Thread(target=_write, args=(settings, name, minutes * 60, rate / len(written),
                                                        seed + i, commits_per_writer[i]), daemon=True)
                   for i, name in enumerate(written)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        drain_started = time.monotonic()
        try:
            _wait("the listener and decide to drain", lambda: _drained(settings, client), 120)
        except RuntimeError as exc:
            print(f"warning: {exc}", file=sys.stderr)
        time.sleep(1.0)  # a decide task taken just now finishes
        cpu_after, elapsed = service.cpu(), time.monotonic() - started
        drain = time.monotonic() - drain_started
        usage_after = db_usage(settings)
        memory = {role: rss_mib(pids) for role, pids in service.roles().items() if role in ROLES}
    finally:
        service.stop()
    commits = [c for part in commits_per_writer for c in part]
    spent = {role: round(cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0), 2) for role in cpu_after}
    control = _control_plane(cpu_after) - _control_plane(cpu_before)
    growth = {name: (usage_after[name][0] - usage_before.get(name, (0, 0))[0],
                     usage_after[name][1] - usage_before.get(name, (0, 0))[1]) for name in usage_after}
    per_k = 1000 / max(1, len(commits))
    return {
        "decide": "inline (baseline)" if inline else "control-queue tasks",
        "tracked_seconds": round(tracked_seconds, 1), "observed_once_seconds": round(observed_seconds, 1),
        **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in _latencies(settings, commits, since).items()},
        "phase_seconds": round(elapsed, 1), "drain_seconds": round(drain, 1),
        "cpu_seconds_by_role": spent,
        "cpu_seconds_per_1000_commits": round(control * per_k, 2),
        "cpu_cores": round(control / elapsed, 3),
        "idle_cpu_seconds_per_hour_per_1000_tables": round(idle / idle_seconds * 3600 / (n / 1000), 1),
        "idle_cpu_seconds_by_role": idle_by_role, "action_states": action_states(settings, since),
        "db_rows_per_1000_commits": round(sum(r for r, _ in growth.values()) * per_k),
        "db_bytes_per_1000_commits": round(sum(b for _, b in growth.values()) * per_k),
        "db_growth_by_table": {k: v for k, v in growth.items() if v != (0, 0)},
        "memory_mib": memory,
    }


def action_states(settings: Settings, since: float) -> dict[str, int]:
    with get_engine(settings).connect() as conn:
        return {r.state: int(r.n) for r in conn.execute(text(
            "SELECT state, count(*) AS n FROM ao_actions WHERE created_at >= to_timestamp(:since) GROUP BY state"),
            {"since": since})}


def retained(settings: Settings) -> dict[str, int]:
    """What the retention job leaves of the history once it is past its full-resolution window."""
    from autooptimize.services.retention import apply_retention

    before = _scalar(settings, "SELECT count(*) FROM ao_entropy_history")
    removed = apply_retention(settings.model_copy(update={"retention_history_full_days": 1e-9}))
    after = _scalar(settings, "SELECT count(*) FROM ao_entropy_history")
    return {"history_rows_before": int(before), "history_rows_after": int(after), **removed}


def measure(tables: int, writers: int, rate: float, minutes: float, idle_seconds: float,
            spark_port: int, keep: bool = False) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="ao-bench-scale-"))
    db_name = f"ao_bench_scale_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=f"postgresql+psycopg2://postgres@localhost:5432/{db_name}", home=home)
    try:
        upgrade(settings)
        started = time.monotonic()
        names = create_tables(settings, tables)
        created = time.monotonic() - started
        # each run writes its own tables: the baseline never meets the first run's merges or queued actions
        runs = [run_service(settings, names, [names[(i * tables // writers + run) % tables] for i in range(writers)],
                            inline=inline, minutes=minutes, rate=rate,
                            idle_seconds=idle_seconds, seed=1000 * (run + 1), spark_port=spark_port)
                for run, inline in enumerate((False, True))]
        return {"tables": tables, "writers": writers, "rate": rate, "minutes": minutes, "cpus": os.cpu_count(),
                "create_seconds": round(created, 1), "now": runs[0], "baseline": runs[1],
                "retention": retained(settings), "date": dt.date.today().isoformat()}
    finally:
        drop_scratch_database(db_name)
        if keep:
            print(f"kept {home} (the services' logs are in logs/)", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)


def _ratio(now: Any, base: Any) -> str:
    try:
        return f"{float(base) / float(now):.1f}×" if float(now) > 0 else "–"
    except (TypeError, ValueError):
        return "–"


def failures(rows: dict[str, Any]) -> list[str]:
    now = rows["now"]
    found = []
    if not now["commits"]:
        found.append("no commit was made")
    if now["missed"]:
        found.append(f"{now['missed']} commit(s) never observed")
    if not now["actions"]:
        found.append("no action was submitted")
    for key, limit in TARGETS.items():
        if not now[key] <= limit:
            found.append(f"{key} {now[key]} over {limit}")
    return found


def report(rows: dict[str, Any]) -> str:
    now, base = rows["now"], rows["baseline"]
    lines = [f"{rows['date']}: {rows['tables']} tables ({rows['create_seconds']} s to create), {rows['writers']} "
             f"written at {rows['rate']} commits/s for {rows['minutes']} min, {rows['cpus']} CPUs shared",
             f"tracked all in {now['tracked_seconds']} s, observed all once in {now['observed_once_seconds']} s",
             f"{'':<44}{'now':>12}{'baseline':>12}  baseline/now"]

    def line(label: str, key: str, unit: str = "") -> None:
        lines.append(f"{label:<44}{str(now[key]) + unit:>12}{str(base[key]) + unit:>12}  {_ratio(now[key], base[key])}")

    line("commits", "commits")
    line("commits never observed", "missed")
    for q in ("p50", "p95", "max"):
        line(f"commit → observed {q}", f"observed_{q}", " s")
    line("actions submitted", "actions")
    for q in ("p50", "p95", "max"):
        line(f"commit → submitted {q}", f"submitted_{q}", " s")
    line("control-plane CPU, cores while writing", "cpu_cores")
    line("control-plane CPU s per 1,000 commits", "cpu_seconds_per_1000_commits")
    line("control-plane CPU s per hour per 1,000 idle tables", "idle_cpu_seconds_per_hour_per_1000_tables")
    line("PostgreSQL rows per 1,000 commits", "db_rows_per_1000_commits")
    line("PostgreSQL bytes per 1,000 commits", "db_bytes_per_1000_commits")
    lines.append(f"CPU s by role: now {now['cpu_seconds_by_role']}; baseline {base['cpu_seconds_by_role']}")
    lines.append(f"idle CPU s by role: now {now['idle_cpu_seconds_by_role']}; "
                 f"baseline {base['idle_cpu_seconds_by_role']}")
    lines.append(f"actions by state: now {now['action_states']}; baseline {base['action_states']}")
    lines.append(f"memory MiB: now {now['memory_mib']}; baseline {base['memory_mib']}")
    lines.append(f"rows growth by table (now): {now['db_growth_by_table']}")
    r = rows["retention"]
    lines.append(f"retention past the full-resolution window: history {r['history_rows_before']} → "
                 f"{r['history_rows_after']} rows (one per partition and hour)")
    failed = failures(rows)
    lines.append("FAILED: " + "; ".join(failed) if failed else "all targets met")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000, help="tables in the catalog, all tracked (default 1000)")
    parser.add_argument("--writers", type=int, default=100, help="tables written, one thread each (default 100)")
    parser.add_argument("--rate", type=float, default=5.0, help="commits per second, all writers (default 5)")
    parser.add_argument("--minutes", type=float, default=2.0, help="length of each measured phase (default 2)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle window per run (default 30)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    parser.add_argument("--keep", action="store_true", help="keep the warehouse and the services' logs")
    args = parser.parse_args(argv)
    if args.tables < 1 or not 1 <= args.writers <= args.tables:
        parser.error(f"--tables must be ≥ 1 and --writers between 1 and --tables (got {args.tables}, {args.writers})")
    if args.rate <= 0 or args.minutes <= 0 or args.idle_seconds <= 0:
        parser.error("--rate, --minutes and --idle-seconds must be > 0")
    spark_port = Settings().spark_port
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (the service, the database) on TERM
    rows = measure(args.tables, args.writers, args.rate, args.minutes, args.idle_seconds, spark_port, args.keep)
    print(report(rows))
    if args.json:
        print(json.dumps(rows, sort_keys=True, default=str))
    return 1 if failures(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
