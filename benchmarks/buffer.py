"""Buffered writes: land thousands of small files per minute into one table and commit them in few
snapshots, beside a baseline that commits each file directly with pyiceberg (one writer, one commit per
file: the commits-per-minute ceiling of the direct approach on this machine).

    python -m benchmarks.buffer [--rate 55] [--minutes 3] [--rows 20] [--max-age 20] [--baseline-seconds 60]

Everything is real: files are written by a producer and landed through ``services.buffer.landing.land`` (footer
check, move into the buffer zone, one INSERT, rules); rules queue ``autooptimize.consolidate`` on Redis;
a Celery worker on the ``ao.buffer`` queue consolidates through Spark Connect and commits one append
snapshot per batch; a tick thread stands in for beat (age rule). Uses the AO_* environment (database,
Redis, AO_HOME, Spark port) like every other command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType, TimestamptzType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "day", DateType(), required=True),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "device", StringType(), required=False),
    NestedField(5, "reading", DoubleType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
DAYS = (dt.date(2026, 11, 21), dt.date(2026, 11, 22))
ARROW = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("day", pa.date32(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("device", pa.string()),
    pa.field("reading", pa.float64()),
])


def producer_file(first_id: int, rows: int) -> pa.Table:
    """One small file of a producer: ``rows`` events, unique ids, spread over two days."""
    now = dt.datetime.now(dt.UTC)
    return pa.table({
        "id": pa.array(range(first_id, first_id + rows), pa.int64()),
        "day": pa.array([DAYS[(first_id + i) % 2] for i in range(rows)], pa.date32()),
        "ts": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
        "device": [f"dev-{(first_id + i) % 97}" for i in range(rows)],
        "reading": [((first_id + i) % 1000) / 10 for i in range(rows)],
    }, schema=ARROW)


def create(catalog, name: str):  # type: ignore[no-untyped-def]
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

    try:
        catalog.create_namespace("bench")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table(f"bench.{name}")
    except NoSuchTableError:
        pass
    return catalog.create_table(f"bench.{name}", schema=SCHEMA, partition_spec=SPEC)


def baseline(catalog, seconds: float, rows: int) -> dict:  # type: ignore[no-untyped-def]
    """One writer committing each small file with ``table.append`` for ``seconds``."""
    table = create(catalog, "direct")
    commits = 0
    started = time.perf_counter()
    latencies = []
    while time.perf_counter() - started < seconds:
        t0 = time.perf_counter()
        table.append(producer_file(commits * rows, rows))
        latencies.append(time.perf_counter() - t0)
        commits += 1
    elapsed = time.perf_counter() - started
    return {"commits": commits, "seconds": round(elapsed, 1), "commits_per_minute": round(commits * 60 / elapsed, 1),
            "commit_p50_s": round(statistics.median(latencies), 3),
            "first_10_commit_s": round(statistics.mean(latencies[:10]), 3),
            "last_10_commit_s": round(statistics.mean(latencies[-10:]), 3)}


def start_worker(settings, log_path: Path) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    argv = [sys.executable, "-m", "celery", "-A", "tasks.app", "worker", "-Q", "ao.buffer", "-c", "1",
            "--loglevel", "INFO", "-n", f"bench-buffer-{uuid.uuid4().hex[:6]}@%h"]
    out = open(log_path, "ab")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ), start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=55.0, help="files landed per second (all landers)")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--rows", type=int, default=20, help="rows per small file")
    parser.add_argument("--landers", type=int, default=3, help="producer processes")
    parser.add_argument("--max-age", default="20s", help="the table's max-age rule")
    parser.add_argument("--max-files", type=int, default=3000)
    parser.add_argument("--baseline-seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from autooptimize.config import get_settings
    from autooptimize.iceberg.catalog import get_catalog
    from autooptimize.storage.db import upgrade
    from spark_actors import server

    settings = get_settings()
    upgrade(settings)
    catalog = get_catalog(settings)
    started_spark = settings.spark_remote == "local" and server.running_server(settings) is None
    if settings.spark_remote == "local":
        server.ensure_local_server(settings)
    logs = settings.home_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    worker = start_worker(settings, logs / "bench-buffer-worker.log")
    try:
        return run(args, settings, catalog)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        if started_spark:
            server.stop_local_server(settings)


def run(args: argparse.Namespace, settings, catalog) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from autooptimize.services.buffer import landing
    from autooptimize.services.buffer import rules as buffer_rules
    from autooptimize.services.buffer.consolidate import tick
    from autooptimize.storage.buffer_models import BufferBatch, BufferFile
    from autooptimize.storage.db import session_scope
    from tasks.send import CeleryDispatch

    print(f"baseline: one pyiceberg append commit per file for {args.baseline_seconds:.0f}s …", file=sys.stderr,
          flush=True)
    base = baseline(catalog, args.baseline_seconds, args.rows)

    # Warm the worker as a long-running one is: its Spark Connect session exists and the JVM has run a
    # consolidation before. A small batch on another table, flushed through the worker.
    warm = create(catalog, "warmup")
    warm_dir = Path(tempfile.mkdtemp(prefix="ao-bench-warm-"))
    warm_files = []
    for i in range(20):
        pq.write_table(producer_file(i * args.rows, args.rows), warm_dir / f"w{i}.parquet")
        warm_files.append(warm_dir / f"w{i}.parquet")
    dispatch = CeleryDispatch(settings)
    landing.land(settings, "bench.warmup", warm_files, move=True, notify=False)
    dispatch.consolidation("bench.warmup", flush=True)
    deadline = time.monotonic() + 300
    while warm.refresh().current_snapshot() is None and time.monotonic() < deadline:
        time.sleep(1)
    print(f"worker warm: {warm.current_snapshot() is not None}", file=sys.stderr, flush=True)

    table = create(catalog, "buffered")
    ident = "bench.buffered"
    buffer_rules.set_rules(settings, ident, max_age=args.max_age, max_files=args.max_files)
    table_id = buffer_rules.ensure_buffer_table(settings, ident)
    stop = threading.Event()

    def ticker() -> None:  # beat's buffer_tick, every 5 s
        while not stop.wait(5.0):
            try:
                tick(settings, dispatch)
            except Exception as exc:  # keep ticking; the run's figures will show the damage
                print(f"tick failed: {exc}", file=sys.stderr)

    tick_thread = threading.Thread(target=ticker, daemon=True)
    tick_thread.start()
    staging = Path(tempfile.mkdtemp(prefix="ao-bench-producer-"))
    total = int(args.rate * args.minutes * 60)
    per_lander = total // args.landers
    print(f"landing {per_lander * args.landers} files of {args.rows} rows at {args.rate:.0f}/s for "
          f"{args.minutes:g} min from {args.landers} producer processes …", file=sys.stderr, flush=True)
    began = time.perf_counter()
    # Producers are processes, as real ones are: landing is partly CPU work, and threads share one GIL.
    with multiprocessing.get_context("spawn").Pool(args.landers) as pool:
        results = pool.starmap(lander, [(k, per_lander, args.landers / args.rate, args.rows, str(staging), ident)
                                        for k in range(args.landers)])
    landing_elapsed = time.perf_counter() - began
    land_seconds = [t for durations, _ in results for t in durations]
    rejected = [sum(r for _, r in results)]
    landed = len(land_seconds) - rejected[0]
    print(f"landed {landed} files in {landing_elapsed:.0f}s; waiting for the buffer to drain …", file=sys.stderr,
          flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with session_scope(settings) as s:
            waiting = s.scalar(select(func.count()).select_from(BufferFile).where(
                BufferFile.buffer_table_id == table_id, BufferFile.state.in_(("buffered", "claimed"))))
        if not waiting:
            break
        time.sleep(2)
    drained = time.perf_counter() - began
    stop.set()

    with session_scope(settings) as s:
        batches = list(s.scalars(select(BufferBatch).where(BufferBatch.committed_at.is_not(None),
                                                           BufferBatch.buffer_table_id == table_id)
                                 .order_by(BufferBatch.committed_at)))
        lat = [r[0] for r in s.execute(select(
            func.extract("epoch", BufferBatch.committed_at - BufferFile.arrived_at))
            .select_from(BufferFile).join(BufferBatch, BufferBatch.id == BufferFile.batch_id)
            .where(BufferFile.state == "committed", BufferFile.buffer_table_id == table_id)).all()]
        quarantined = s.scalar(select(func.count()).select_from(BufferFile).where(
            BufferFile.state == "quarantined", BufferFile.buffer_table_id == table_id))
    table.refresh()
    scan = table.scan(selected_fields=("id",)).to_arrow()["id"]
    rows_expected = landed * args.rows
    lat_sorted = sorted(float(x) for x in lat)
    first_commit = batches[0].committed_at if batches else None
    last_commit = batches[-1].committed_at if batches else None
    commit_span_min = (last_commit - first_commit).total_seconds() / 60 if len(batches) > 1 else float("nan")
    files_per_commit = [b.files for b in batches]
    batch_seconds = [b.timings.get("total") for b in batches if b.timings and b.timings.get("total")]
    result = {
        "landed_files": landed,
        "landing_seconds": round(landing_elapsed, 1),
        "landed_files_per_minute": round(landed * 60 / landing_elapsed, 1),
        "land_call_p50_ms": round(statistics.median(land_seconds) * 1000, 1),
        "land_call_p95_ms": round(lat_quantile(sorted(land_seconds), 0.95) * 1000, 1),
        "rejected": rejected[0],
        "quarantined": quarantined,
        "commits": len(batches),
        "commits_per_minute": round(len(batches) / (drained / 60), 2),
        "files_per_commit_mean": round(statistics.mean(files_per_commit), 1) if batches else 0,
        "files_per_commit_max": max(files_per_commit, default=0),
        "batch_seconds_p50": round(statistics.median(batch_seconds), 1) if batch_seconds else None,
        "latency_p50_s": round(lat_quantile(lat_sorted, 0.50), 1),
        "latency_p95_s": round(lat_quantile(lat_sorted, 0.95), 1),
        "committed_files_per_minute": round(len(lat) * 60 / drained, 1),
        "first_to_last_commit_minutes": round(commit_span_min, 2),
        "rows_expected": rows_expected,
        "rows_in_table": len(scan),
        "rows_unique": len(set(scan.to_pylist())) == len(scan),
        "baseline": base,
        "ratio_files_per_minute_vs_baseline": round((landed * 60 / landing_elapsed) / base["commits_per_minute"], 1),
    }
    print(f"buffered: landed {result['landed_files_per_minute']} files/min (land() p50 {result['land_call_p50_ms']} ms, "
          f"p95 {result['land_call_p95_ms']} ms); {result['commits']} commits = {result['commits_per_minute']} "
          f"commits/min, {result['files_per_commit_mean']} files/commit (max {result['files_per_commit_max']}), "
          f"Spark batch p50 {result['batch_seconds_p50']} s")
    print(f"          landing→committed latency p50 {result['latency_p50_s']} s, p95 {result['latency_p95_s']} s; "
          f"rows {result['rows_in_table']}/{result['rows_expected']}, unique={result['rows_unique']}")
    print(f"baseline: one pyiceberg append per file: {base['commits_per_minute']} commits/min = files/min "
          f"(commit p50 {base['commit_p50_s']} s; first 10 {base['first_10_commit_s']} s, last 10 "
          f"{base['last_10_commit_s']} s)")
    print(f"ratio: buffered landing {result['ratio_files_per_minute_vs_baseline']}× the direct-commit ceiling")
    if args.json:
        print(json.dumps(result, default=str))
    ok = result["rows_in_table"] == rows_expected and result["rows_unique"]
    return 0 if ok else 1


def lander(k: int, count: int, interval: float, rows: int, staging: str, ident: str) -> tuple[list[float], int]:
    """One producer process: write a small file, land it (moved), at a fixed pace; returns land() times."""
    from autooptimize.config import get_settings
    from autooptimize.services.buffer.landing import land
    from tasks.send import CeleryDispatch

    settings = get_settings()
    durations: list[float] = []
    rejected = 0
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        n = k * count + i
        path = Path(staging) / f"f{n}.parquet"
        pq.write_table(producer_file(n * rows, rows), path)
        t0 = time.perf_counter()
        result = land(settings, ident, [path], move=True, dispatch=CeleryDispatch(settings))
        durations.append(time.perf_counter() - t0)
        rejected += len(result["rejected"])
    return durations, rejected


def lat_quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


if __name__ == "__main__":
    sys.exit(main())
