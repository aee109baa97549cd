"""Merge throughput on one partition of ≥200 files and ≥100 MB, beside a plain pyarrow
read-and-rewrite of the same files on the same machine.

    python -m benchmarks.merge [--files 200] [--mb 110] [--json]

The merge goes through the real action path (plan, Spark Connect rewrite by field id, verification
of rows and checksums, REPLACE commit); the baseline only reads and writes Parquet.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def build_table(settings, files: int, total_mb: int):  # type: ignore[no-untyped-def]
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

    from autooptimize.demo import ARROW, SCHEMA, SPEC
    from autooptimize.iceberg.catalog import get_catalog

    catalog = get_catalog(settings)
    try:
        catalog.create_namespace("bench")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table("bench.merge")
    except NoSuchTableError:
        pass
    table = catalog.create_table("bench.merge", schema=SCHEMA, partition_spec=SPEC)
    rng = random.Random(11)
    # ~42 bytes per row on disk, measured: random payloads and ids barely compress
    rows_per_file = max(100, total_mb * 1024 * 1024 // files // 40)
    day = dt.date(2026, 11, 1)
    base = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    next_id = 0
    for _ in range(files):
        n = rows_per_file
        batch = pa.table({
            "event_id": pa.array(range(next_id, next_id + n), pa.int64()),
            "event_date": [day] * n,
            "ts": [base + dt.timedelta(microseconds=rng.getrandbits(36)) for _ in range(n)],
            "user_id": [rng.getrandbits(40) for _ in range(n)],
            "region": [rng.choice(("eu", "us", "apac", "latam")) for _ in range(n)],
            "amount": [rng.random() * 1000 for _ in range(n)],
            "payload": [os.urandom(12).hex() for _ in range(n)],
        }, schema=ARROW)
        table.append(batch)
        next_id += n
    return table


def pyarrow_baseline(paths: list[str], codec: str) -> float:
    """Seconds to read every file and write one zstd Parquet file with pyarrow."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        data = pa.concat_tables(pq.read_table(p.removeprefix("file://")) for p in paths)
        pq.write_table(data, os.path.join(tmp, "out.parquet"), compression=codec)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--mb", type=int, default=110)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from autooptimize.config import get_settings
    from autooptimize.services import actions, tracking
    from autooptimize.storage.db import upgrade
    from spark_actors.session import get_session

    settings = get_settings()
    upgrade(settings)
    print(f"building bench.merge: {args.files} files, ~{args.mb} MB …", file=sys.stderr, flush=True)
    table = build_table(settings, args.files, args.mb)
    files = table.inspect.files()
    paths = [str(p) for p in files["file_path"].to_pylist()]
    bytes_in = sum(files["file_size_in_bytes"].to_pylist())
    spark = get_session(settings)
    # Warm, as a long-running actor is: the JVM has read Parquet before, and the inputs are in the page
    # cache for both contenders (the pyarrow baseline runs second, on the same files).
    from spark_actors.schema import spark_schema

    spark.read.schema(spark_schema(table.schema())).parquet(*paths).count()

    tracking.track(settings, "bench.merge", target_file_size="128MiB")
    action_id = actions.submit(settings, "bench.merge", partition="event_date=2026-11-01", dispatch=False)
    started = time.perf_counter()
    out = actions.execute(settings, action_id, spark=spark)
    merge_seconds = time.perf_counter() - started
    if out["state"] != "succeeded":
        print(json.dumps(out, default=str), file=sys.stderr)
        return 1
    baseline_seconds = pyarrow_baseline(paths, "zstd")
    mb = bytes_in / 1e6
    result = {
        "files_in": out["files_in"],
        "files_out": out["files_out"],
        "mb_in": round(mb, 1),
        "rows": out["rows_out"],
        "merge_seconds": round(merge_seconds, 2),
        "merge_mb_per_s": round(mb / merge_seconds, 2),
        "pyarrow_seconds": round(baseline_seconds, 2),
        "pyarrow_mb_per_s": round(mb / baseline_seconds, 2),
        "ratio_merge_to_pyarrow": round((mb / merge_seconds) / (mb / baseline_seconds), 3),
        "verified": out["checksum_in"] == out["checksum_out"] and out["rows_in"] == out["rows_out"],
    }
    print(f"merge (plan + Spark rewrite + verify + commit): {result['merge_mb_per_s']:>8} MB/s "
          f"({result['merge_seconds']} s for {result['mb_in']} MB, {result['files_in']} → {result['files_out']} files)")
    print(f"baseline (pyarrow read + write, no checks):      {result['pyarrow_mb_per_s']:>8} MB/s "
          f"({result['pyarrow_seconds']} s)")
    print(f"ratio merge / baseline: {result['ratio_merge_to_pyarrow']}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
