"""Merge throughput of one warm action over a whole table, beside a plain pyarrow rewrite of the same
files from the same run.

    python -m benchmarks.merge [--files 1000] [--mb 200] [--partitions 8] [--engine spark] [--json]

The table is written the way streaming leaves one: ``--files`` small files over ``--partitions`` day
partitions of ``day(ts)``, in commits of one file per partition. The merge goes through the real action
path (plan, rewrite, verification of rows and the content digest on both sides, REPLACE commit,
bookkeeping) for the whole table at once, after a warm-up that has read every file once (a long-running
actor has). The baseline reads each partition's files with pyarrow and writes them as one zstd Parquet
file, without any check. It prints both in MB/s, their ratio, and the action's per-phase profile as
recorded in its ``timings``; then the CPU seconds of the plain rewrite, of the same groups run in this
process by the function the tasks run (verification included), and of the tasks' Python workers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NAME = "bench.merge"


def _rows(rng: np.random.Generator, day: dt.date, first_id: int, n: int) -> pa.Table:
    from autooptimize.demo import ARROW

    base = int(dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC).timestamp() * 1_000_000)
    payload = rng.integers(0, 2**62, size=n, dtype=np.int64)
    return pa.table({
        "event_id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
        "event_date": pa.array([day] * n, pa.date32()),
        "ts": pa.array(base + rng.integers(0, 86_400_000_000, size=n), pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(rng.integers(0, 2**40, size=n, dtype=np.int64)),
        "region": pa.array(np.array(["eu", "us", "apac", "latam"])[rng.integers(0, 4, size=n)]),
        "amount": pa.array(rng.random(n) * 1000),
        "payload": pa.array([f"{v:016x}" for v in payload.tolist()]),
    }, schema=ARROW)


def build_table(settings, files: int, total_mb: int, partitions: int):  # type: ignore[no-untyped-def]
    """``files`` files over ``partitions`` days, one file per partition per commit (≈ files/partitions commits)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

    from autooptimize.demo import SCHEMA, SPEC
    from autooptimize.iceberg.catalog import get_catalog

    catalog = get_catalog(settings)
    try:
        catalog.create_namespace("bench")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table(NAME)
    except NoSuchTableError:
        pass
    table = catalog.create_table(NAME, schema=SCHEMA, partition_spec=SPEC)
    rng = np.random.default_rng(11)
    rows_per_file = max(100, total_mb * 1_000_000 // files // 40)  # ~40 bytes a row on disk, measured
    days = [dt.date(2026, 11, 1) + dt.timedelta(days=d) for d in range(partitions)]
    next_id = 0
    for _ in range(max(1, files // partitions)):
        parts = []
        for day in days:
            n = int(rows_per_file * rng.uniform(0.6, 1.4))
            parts.append(_rows(rng, day, next_id, n))
            next_id += n
        table.append(pa.concat_tables(parts))
    return table


def pyarrow_baseline(by_partition: dict[str, list[str]], codec: str) -> tuple[float, float]:
    """Seconds and CPU seconds (every thread of this process) to read each partition's files and write them
    as one Parquet file, with plain pyarrow."""
    with tempfile.TemporaryDirectory() as tmp:
        started, cpu = time.perf_counter(), time.process_time()
        for i, paths in enumerate(by_partition.values()):
            data = pa.concat_tables(pq.read_table(p.removeprefix("file://")) for p in paths)
            pq.write_table(data, os.path.join(tmp, f"out-{i}.parquet"), compression=codec)
        return time.perf_counter() - started, time.process_time() - cpu


def groups_in_process(table, snapshot_id: int, codec: str) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds of this process running each partition's group with the very function an executor's
    task runs (``spark_actors.group_tasks.rewrite_group``: read, digest, write, read back, digest), on the
    files of ``snapshot_id`` (before the merge), outputs in a scratch directory of the table removed after.
    Beside the tasks' CPU it separates what the work costs from what running it in Spark adds."""
    from autooptimize.iceberg.paths import delete_tree
    from spark_actors.group_tasks import rewrite_group

    by_partition: dict[tuple[int, str], list] = defaultdict(list)  # type: ignore[type-arg]
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        by_partition[(task.file.spec_id, repr(task.file.partition))].append(task.file)
    scratch = f"{table.location().rstrip('/')}/data/bench-in-process"
    cpu = time.process_time()
    for i, files in enumerate(by_partition.values()):
        rewrite_group(table, files, f"{scratch}/{i}", 1, codec, None, (files[0].spec_id, files[0].partition),
                      None, None, None)
    spent = time.process_time() - cpu
    delete_tree(table.location(), scratch, table.io)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--engine", default=None, help="AO_REWRITE_ENGINE for the action (default: the setting's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine:
        os.environ["AO_REWRITE_ENGINE"] = args.engine
    from benchmarks.compact_deletes import run_with_server

    return run_with_server(lambda settings: _measure(settings, args))


def _measure(settings: Any, args: argparse.Namespace) -> int:
    from autooptimize.services import actions, tracking
    from spark_actors.session import get_session

    print(f"building {NAME}: {args.files} files, ~{args.mb} MB, {args.partitions} partitions …",
          file=sys.stderr, flush=True)
    table = build_table(settings, args.files, args.mb, args.partitions)
    files = table.inspect.files()
    paths = [str(p) for p in files["file_path"].to_pylist()]
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path, partition in zip(paths, files["partition"].to_pylist(), strict=True):
        by_partition[json.dumps(partition, default=str)].append(path)
    bytes_in = sum(files["file_size_in_bytes"].to_pylist())
    spark = get_session(settings)
    # Warm, as a long-running actor is: the JVM has read Parquet before, and the inputs are in the page
    # cache for both contenders (the pyarrow baseline runs second, on the same files).
    from spark_actors.schema import spark_schema

    spark.read.schema(spark_schema(table.schema())).parquet(*paths).count()
    pa.concat_tables(pq.read_table(p.removeprefix("file://")) for p in paths)
    # and its executors' Python workers are up with our code (spark_actors/action_job.py)
    from spark_actors import group_tasks
    from spark_actors.action_job import TableContext, run_action_job

    run_action_job(spark, TableContext.of(table), [(group_tasks.warm, ())] * settings.spark_cores)

    before_merge = table.current_snapshot().snapshot_id
    tracking.track(settings, NAME, target_file_size="128MiB")
    action_id = actions.submit(settings, NAME, dispatch=False)
    started = time.perf_counter()
    out = actions.execute(settings, action_id, spark=spark)
    merge_seconds = time.perf_counter() - started
    if out["state"] != "succeeded":
        print(json.dumps(out, default=str), file=sys.stderr)
        return 1
    baseline_seconds, baseline_cpu = pyarrow_baseline(by_partition, "zstd")
    in_process_cpu = groups_in_process(table, before_merge, "zstd")
    mb = bytes_in / 1e6
    from autooptimize.storage.db import session_scope
    from autooptimize.storage.repositories import get_action

    with session_scope(settings) as session:
        checkpoint = get_action(session, action_id).checkpoint or {}
    engines = sorted({g.get("engine", "?") for g in checkpoint.get("groups", [])})
    timings = out.get("timings") or {}
    result = {
        "files_in": out["files_in"],
        "files_out": out["files_out"],
        "partitions": len(by_partition),
        "mb_in": round(mb, 1),
        "rows": out["rows_out"],
        "engines": engines,
        "merge_seconds": round(merge_seconds, 2),
        "merge_mb_per_s": round(mb / merge_seconds, 2),
        "pyarrow_seconds": round(baseline_seconds, 2),
        "pyarrow_mb_per_s": round(mb / baseline_seconds, 2),
        "ratio_merge_to_pyarrow": round(baseline_seconds / merge_seconds, 3),
        "pyarrow_cpu_seconds": round(baseline_cpu, 2),
        "groups_in_process_cpu_seconds": round(in_process_cpu, 2),
        "profile_seconds": timings,
        # the action's Spark job beyond its tasks' own time spread over the cores: scheduling, the Python
        # workers' turn-around between tasks, the job's start and collection
        "job_outside_tasks_seconds": round(timings.get("action.spark_job", 0.0)
                                           - timings.get("task.wall", 0.0) / settings.spark_cores, 2),
        "verified": out["checksum_in"] == out["checksum_out"] and out["rows_in"] == out["rows_out"],
    }
    print(f"merge (whole table: plan, rewrite, verify, commit; {'/'.join(engines)}): "
          f"{result['merge_mb_per_s']:>7} MB/s ({result['merge_seconds']} s for {result['mb_in']} MB, "
          f"{result['files_in']} → {result['files_out']} files in {result['partitions']} partitions)")
    print(f"baseline (pyarrow read + write per partition, no checks): {result['pyarrow_mb_per_s']:>7} MB/s "
          f"({result['pyarrow_seconds']} s)")
    print(f"ratio merge / baseline: {result['ratio_merge_to_pyarrow']}")
    tasks_cpu = timings.get("task.cpu")
    print(f"CPU s: the plain rewrite {result['pyarrow_cpu_seconds']}; the same groups run in this process by the "
          f"tasks' own function (verification included) {result['groups_in_process_cpu_seconds']} "
          f"({result['groups_in_process_cpu_seconds'] / max(baseline_cpu, 1e-9):.2f}× the plain rewrite); "
          f"the Spark tasks' Python workers {tasks_cpu if tasks_cpu is not None else '-'}")
    print(f"the Spark job outside its tasks (job − task wall / {settings.spark_cores} cores): "
          f"{result['job_outside_tasks_seconds']} s")
    print("profile (s): " + ", ".join(f"{k} {v:.2f}" for k, v in result["profile_seconds"].items()))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
