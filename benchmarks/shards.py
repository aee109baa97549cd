"""Two sharded listeners share many tables; a ``kill -9`` of one moves its shards to the other within the
lease, while a writer commits throughout, and no snapshot is missed (issue 26, Done-when 2).

    python -m benchmarks.shards [--tables 1000] [--shards 16] [--lease 10] [--before 10] [--after 15]
                                [--writers 2] [--rate 4] [--workers 4] [--json]

Creates a throw-away PostgreSQL database and warehouse with ``--tables`` tracked tables (pyiceberg's
SqlCatalog, two partitions each), starts two listeners as their own processes (``python -m
scheduler.listener``, AO_LISTENER_SHARDS and AO_LISTENER_LEASE_SECONDS set), lets them observe every
table once, then commits small appends to random tables from ``--writers`` threads, ``--rate`` commits a
second in all (0: as fast as they go; the machine's writers, listeners and PostgreSQL share its CPUs, so a
rate the listeners keep up with shows the hand-over's own delay). After ``--before``
seconds the listener holding shard 0 (the catalog-wide chores too) is killed with SIGKILL; the writers go on
for ``--after`` seconds. Reported, each beside its baseline from the same run:

- the time from the kill until every shard of the dead listener is held by the other, beside the lease
  (the bound);
- commit → stats delay of the commits to the moved tables made after the kill, beside that of the
  other commits (the hand-over's cost to a writer);
- commits missed (no history row of their snapshot once the survivor caught up): must be 0;
- tables whose rolling stats differ from a full recomputation (exact integers): must be 0.

Exits 1 when any of these fails, or when nothing was committed to a moved table after the kill.
"""

from __future__ import annotations

import argparse
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

from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.domain.shards import shard_of
from autooptimize.iceberg.catalog import get_catalog
from autooptimize.services import tracking
from autooptimize.services.observe.changes import changed_tables
from autooptimize.storage.db import get_engine, session_scope, upgrade
from autooptimize.storage.shard_leases import holders
from benchmarks.exact import stats_mismatches
from benchmarks.listener import DAYS, REPO, SCHEMA, SPEC, batch_of, percentile
from benchmarks.scratch import drop_scratch_database

TARGET = 1 << 20


def _setup(settings: Settings, tables: int) -> list[str]:
    catalog = get_catalog(settings)
    catalog.create_namespace("bench")

    def one(i: int) -> str:
        name = f"bench.t{i:04d}"
        catalog.create_table(name, schema=SCHEMA, partition_spec=SPEC).append(batch_of(0, 10, DAYS[i % 2]))
        tracking.track(settings, name, target_file_size=TARGET)
        return name

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(tables)))


def _listener(settings: Settings, log: Path, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AO_DATABASE_URL": settings.database_url, "AO_HOME": str(settings.home),
           "AO_CATALOG": settings.catalog, "AO_REDIS_URL": settings.redis_url,
           "AO_LISTENER_SHARDS": str(settings.listener_shards),
           "AO_LISTENER_LEASE_SECONDS": str(settings.listener_lease_seconds), "PYTHONPATH": str(REPO)}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "scheduler.listener", "--interval", "0.1",
                                 "--workers", str(workers)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _held_by_pid(settings: Settings) -> dict[int, set[int]]:
    with session_scope(settings) as session:
        shards = holders(session, settings.catalog, settings.listener_shards)
    by_pid: dict[int, set[int]] = {}
    for shard, holder in shards.items():
        by_pid.setdefault(json.loads(holder)["pid"] if holder else 0, set()).add(shard)
    return by_pid


def _wait(predicate: Any, timeout: float, what: str, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def _write(settings: Settings, names: list[str], stop: threading.Event, seed: int, rate: float,
           commits: list[tuple[str, int, float, float]]) -> None:
    """Append to random tables of ``names`` at ``rate`` commits/s (0: flat out) until ``stop``; records
    (table, snapshot, wall clock, monotonic clock) of each commit."""
    rng = random.Random(seed)
    catalog = get_catalog(settings)
    tables = {n: catalog.load_table(n) for n in names}
    next_id = 1_000_000_000 * (seed + 1)
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        if rate and stop.wait(max(0.0, started + sent / rate - time.monotonic())):
            break
        sent += 1
        name = rng.choice(names)
        table = tables[name]
        table.append(batch_of(next_id, 10, rng.choice(DAYS[:2])))
        snapshot = table.current_snapshot()
        assert snapshot is not None
        commits.append((name, snapshot.snapshot_id, time.time(), time.monotonic()))
        next_id += 10


def _recorded(settings: Settings) -> dict[tuple[str, int], float]:
    with get_engine(settings).connect() as conn:
        return {
            (r.identifier, int(r.snapshot_id)): float(r.at)
            for r in conn.execute(text(
                "SELECT t.identifier, h.snapshot_id, extract(epoch FROM min(h.recorded_at)) AS at "
                "FROM ao_entropy_history h JOIN ao_tracked_tables t ON t.id = h.table_id "
                "WHERE h.source = 'snapshot' GROUP BY t.identifier, h.snapshot_id"))
        }


def measure(tables: int, shards: int, lease: float, before: float, after: float, writers: int, rate: float,
            workers: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="ao-bench-shards-"))
    db_name = f"ao_bench_shards_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=f"postgresql+psycopg2://postgres@localhost:5432/{db_name}", home=home,
                        listener_shards=shards, listener_lease_seconds=lease)
    listeners: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        upgrade(settings)
        started = time.monotonic()
        names = _setup(settings, tables)
        setup_seconds = time.monotonic() - started
        listeners = [_listener(settings, home / f"listener{i}.log", workers) for i in range(2)]
        half = sorted([shards // 2, shards - shards // 2])
        _wait(lambda: sorted(len(s) for p, s in _held_by_pid(settings).items() if p) == half
              and 0 not in _held_by_pid(settings), 120, "two listeners holding half the shards each")
        started = time.monotonic()
        _wait(lambda: not changed_tables(settings), 900, "the first observation of every table", step=0.5)
        first_sight_seconds = time.monotonic() - started

        per_writer: list[list[tuple[str, int, float, float]]] = [[] for _ in range(writers)]
        threads = [threading.Thread(target=_write, args=(settings, names[w::writers], stop, w, rate / writers, per_writer[w]),
                                    daemon=True) for w in range(writers)]
        for t in threads:
            t.start()
        time.sleep(before)
        held = _held_by_pid(settings)
        victim = next(p for p in listeners if 0 in held.get(p.pid, set()))
        survivor = next(p for p in listeners if p is not victim)
        lost = held[victim.pid]
        killed = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        _wait(lambda: _held_by_pid(settings).get(survivor.pid, set()) >= lost, 10 * lease, "the hand-over", 0.02)
        moved_seconds = time.monotonic() - killed
        time.sleep(after)
        stop.set()
        for t in threads:
            t.join(60)
        started = time.monotonic()
        _wait(lambda: not changed_tables(settings), 600, "the survivor to catch up", step=0.2)
        catch_up_seconds = time.monotonic() - started
        if survivor.poll() is not None:
            raise RuntimeError(f"the surviving listener exited with {survivor.returncode}")

        commits = [c for part in per_writer for c in part]
        recorded = _recorded(settings)
        missed = [(n, s) for n, s, _, _ in commits if (n, s) not in recorded]
        moved_tables = {n for n in names if shard_of(n, shards) in lost}
        delays = {(n, s): max(0.0, recorded[(n, s)] - wall) for n, s, wall, _ in commits if (n, s) in recorded}
        during = [delays[(n, s)] for n, s, _, mono in commits
                  if n in moved_tables and killed <= mono <= killed + moved_seconds and (n, s) in delays]
        after_kill = [delays[(n, s)] for n, s, _, mono in commits
                      if n in moved_tables and mono >= killed and (n, s) in delays]
        others = [delays[(n, s)] for n, s, _, _ in commits if n not in moved_tables and (n, s) in delays]
        started = time.monotonic()
        mismatches = stats_mismatches(settings, names, TARGET)
        check_seconds = time.monotonic() - started
        return {
            "tables": tables, "shards": shards, "lease_seconds": lease, "writers": writers, "rate": rate,
            "listener_workers": workers, "setup_seconds": round(setup_seconds, 1),
            "first_sight_seconds": round(first_sight_seconds, 1),
            "shards_moved": len(lost), "moved_tables": len(moved_tables),
            "moved_seconds": round(moved_seconds, 2),
            "moved_to_lease_ratio": round(moved_seconds / lease, 2),
            "commits": len(commits), "commits_to_moved_after_kill": len(after_kill),
            "commits_during_hand_over": len(during),
            "moved_delay_max_seconds": round(max(after_kill), 2) if after_kill else None,
            "moved_delay_p95_seconds": round(percentile(after_kill, 0.95), 2) if after_kill else None,
            "others_delay_p95_seconds": round(percentile(others, 0.95), 2) if others else None,
            "others_delay_p50_seconds": round(percentile(others, 0.5), 2) if others else None,
            "catch_up_seconds": round(catch_up_seconds, 1),
            "commits_missed": len(missed), "missed_examples": missed[:3],
            "tables_differing": len(mismatches), "differing_examples": mismatches[:3],
            "exact_check_seconds": round(check_seconds, 1), "cpus": os.cpu_count(),
        }
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        for proc in listeners:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        drop_scratch_database(db_name)
        shutil.rmtree(home, ignore_errors=True)


def failures(rows: dict[str, Any]) -> list[str]:
    found = []
    if rows["commits_to_moved_after_kill"] == 0:
        found.append("no commit reached a moved table after the kill: the run shows nothing")
    if rows["moved_seconds"] > rows["lease_seconds"]:
        found.append(f"shards moved {rows['moved_seconds']} s after the kill, over the {rows['lease_seconds']} s lease")
    if rows["commits_missed"]:
        found.append(f"{rows['commits_missed']} commits missed, e.g. {rows['missed_examples']}")
    if rows["tables_differing"]:
        found.append(f"{rows['tables_differing']} tables differ from a full scan, e.g. {rows['differing_examples']}")
    return found


def report(rows: dict[str, Any]) -> str:
    return "\n".join([
        f"{rows['tables']} tables in {rows['shards']} shards, two listeners ({rows['listener_workers']} workers each), "
        f"{rows['writers']} writer threads ({rows['rate'] or 'flat out'} commits/s), {rows['cpus']} CPUs shared by all (set-up {rows['setup_seconds']} s, "
        f"first observation of every table {rows['first_sight_seconds']} s)",
        f"kill -9 of the listener holding shard 0: its {rows['shards_moved']} shards ({rows['moved_tables']} tables) "
        f"held by the other {rows['moved_seconds']} s later vs the lease {rows['lease_seconds']} s "
        f"(×{rows['moved_to_lease_ratio']} of the bound)",
        f"commit → stats delay on the moved tables after the kill: p95 {rows['moved_delay_p95_seconds']} s, "
        f"max {rows['moved_delay_max_seconds']} s ({rows['commits_to_moved_after_kill']} commits, "
        f"{rows['commits_during_hand_over']} during the hand-over) vs p95 {rows['others_delay_p95_seconds']} s "
        f"(p50 {rows['others_delay_p50_seconds']} s) on the other tables",
        f"{rows['commits']} commits, {rows['commits_missed']} missed; the survivor caught up "
        f"{rows['catch_up_seconds']} s after the writers stopped",
        f"tables whose rolling stats differ from a full recomputation: {rows['tables_differing']} of {rows['tables']} "
        f"(checked in {rows['exact_check_seconds']} s)",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shards", description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000, help="tracked tables (default 1000)")
    parser.add_argument("--shards", type=int, default=16, help="AO_LISTENER_SHARDS (default 16)")
    parser.add_argument("--lease", type=float, default=10.0, help="AO_LISTENER_LEASE_SECONDS (default 10)")
    parser.add_argument("--before", type=float, default=10.0, help="seconds of writing before the kill (default 10)")
    parser.add_argument("--after", type=float, default=15.0, help="seconds of writing after the hand-over (default 15)")
    parser.add_argument("--writers", type=int, default=2, help="committing threads (default 2)")
    parser.add_argument("--rate", type=float, default=4.0, help="commits a second in all, 0: flat out (default 4)")
    parser.add_argument("--workers", type=int, default=4, help="tables each listener observes at once (default 4)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    args = parser.parse_args(argv)
    if args.tables < 2 or args.shards < 2 or args.writers < 1 or args.workers < 1:
        parser.error("--tables and --shards must be ≥ 2, --writers and --workers ≥ 1")
    if args.lease < 2 or args.before <= 0 or args.after <= 0 or args.rate < 0:
        parser.error("--lease must be ≥ 2 seconds, --before and --after > 0, --rate ≥ 0")
    rows = measure(args.tables, args.shards, args.lease, args.before, args.after, args.writers, args.rate,
                   args.workers)
    print(report(rows))
    if args.json:
        print(json.dumps(rows, sort_keys=True, default=str))
    problems = failures(rows)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
