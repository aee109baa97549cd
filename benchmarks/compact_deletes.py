"""Delete-compaction throughput on ≥100 MB, beside the plain merge of the same data in the same run.

    python -m benchmarks.compact_deletes [--files 100] [--mb 110] [--deleted 0.05] [--json]

Two tables get identical data files (one partition, ``--files`` files, ~``--mb`` MB). The compaction
table also gets real v2 delete files: position deletes removing ``--deleted`` of each file's rows (one
delete file per 10 data files, as a streaming writer would commit them) and two equality delete files
on ``event_id``. Both actions go through the real path (plan, Spark Connect rewrite, verification of
rows and checksums, REPLACE commit); each figure is MB of input data files per second of the action.
The compaction is checked against an independent count of the rows the deletes remove.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _batch(rng: np.random.Generator, first_id: int, rows: int) -> pa.Table:
    from autooptimize.demo import ARROW

    day = dt.date(2026, 11, 1)
    base = np.datetime64("2026-11-01T00:00:00", "us")
    payload = rng.integers(0, 2**63, size=(rows, 2), dtype=np.int64)
    return pa.table({
        "event_id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
        "event_date": pa.array([day] * rows, pa.date32()),
        "ts": pa.array(base + rng.integers(0, 2**36, rows).astype("timedelta64[us]")).cast(
            pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(rng.integers(0, 2**40, rows, dtype=np.int64)),
        "region": pa.array(np.array(["eu", "us", "apac", "latam"])[rng.integers(0, 4, rows)]),
        "amount": pa.array(rng.random(rows) * 1000),
        "payload": pa.array([f"{a:016x}{b:08x}" for a, b in payload]),
    }, schema=ARROW)


def build_table(settings, name: str, files: int, total_mb: int,  # type: ignore[no-untyped-def]
                location: str | None = None):
    """``bench.<name>`` of ``files`` files, ~``total_mb`` MB, at ``location`` (default: the warehouse)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

    from autooptimize.demo import SCHEMA, SPEC
    from autooptimize.iceberg.catalog import get_catalog

    catalog = get_catalog(settings)
    try:
        catalog.create_namespace("bench")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table(f"bench.{name}")
    except NoSuchTableError:
        pass
    table = catalog.create_table(f"bench.{name}", schema=SCHEMA, location=location, partition_spec=SPEC)
    rng = np.random.default_rng(11)  # the same seed: both tables hold the same rows
    rows_per_file = max(100, total_mb * 1024 * 1024 // files // 42)
    for i in range(files):
        table.append(_batch(rng, i * rows_per_file, rows_per_file))
    return table


def add_deletes(table, fraction: float) -> int:  # type: ignore[no-untyped-def]
    """Commit position and equality deletes; returns how many rows they remove (counted here)."""
    from autooptimize.iceberg.deletes import (
        commit_delete_files,
        scope_of,
        write_equality_deletes,
        write_position_deletes,
    )

    rng = np.random.default_rng(7)
    files = sorted(table.inspect.files().select(["file_path", "record_count"]).to_pylist(),
                   key=lambda r: r["file_path"])
    deleted: set[tuple[str, int]] = set()
    for start in range(0, len(files), 10):
        chunk = files[start:start + 10]
        rows = []
        for f in chunk:
            n = int(f["record_count"])
            for pos in rng.choice(n, size=max(1, int(n * fraction)), replace=False):
                rows.append((f["file_path"], int(pos)))
        deleted.update(rows)
        commit_delete_files(table, [write_position_deletes(table, scope_of(table, chunk[0]["file_path"]), rows)])
    # equality deletes on ids spread over the whole table (some already position-deleted: counted once)
    first_path = files[0]["file_path"]
    total = sum(int(f["record_count"]) for f in files)
    ids = [int(i) for i in rng.choice(total, size=20_000, replace=False)]
    for half in (ids[:10_000], ids[10_000:]):
        eq = write_equality_deletes(table, scope_of(table, first_path), ["event_id"], [{"event_id": i} for i in half])
        commit_delete_files(table, [eq])
    # Where each equality-deleted id lives: every file holds consecutive ids from its first one.
    by_first_id = []
    for f in files:
        with table.io.new_input(f["file_path"]).open() as stream:
            first = pq.read_table(stream, columns=["event_id"]).column(0)[0].as_py()
        by_first_id.append((first, f["file_path"]))
    by_first_id.sort()
    starts = [first for first, _ in by_first_id]
    for i in ids:
        first, path = by_first_id[int(np.searchsorted(starts, i, side="right")) - 1]
        deleted.add((path, i - first))
    return len(deleted)


def run_action(settings, spark, identifier: str, kind: str, *, target: str = "128MiB",  # type: ignore[no-untyped-def]
               options: dict | None = None) -> tuple[dict, float]:
    """One action on the benchmark partition through submit/execute; its result and wall seconds."""
    from autooptimize.services import actions, tracking

    tracking.track(settings, identifier, target_file_size=target)
    action_id = actions.submit(settings, identifier, partition="ts_day=2026-11-01", kind=kind, dispatch=False,
                               options=options)
    started = time.perf_counter()
    out = actions.execute(settings, action_id, spark=spark)
    return out, time.perf_counter() - started


def warm(spark, tables) -> None:  # type: ignore[no-untyped-def]
    """Read every table's data files once, as a long-running actor has: a warm JVM, inputs in the page cache."""
    from spark_actors.schema import spark_schema

    for t in tables:
        paths = [str(p) for p in t.inspect.files()["file_path"].to_pylist()]
        if paths and not paths[0].startswith("file:"):
            continue  # Spark's own reader reaches only local files; an object store has no page cache to warm
        spark.read.schema(spark_schema(t.schema())).parquet(*paths).count()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--mb", type=int, default=110)
    parser.add_argument("--deleted", type=float, default=0.05, help="fraction of each file's rows position-deleted")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    return run_with_server(lambda settings: _measure(settings, args))


def run_with_server(measure: Callable[[Any], int]) -> int:
    """``measure(settings)`` on a migrated database; a local Spark server it had to start is stopped after."""
    from autooptimize.config import get_settings
    from autooptimize.storage.db import upgrade
    from spark_actors.server import running_server, stop_local_server
    from spark_actors.session import close_session

    settings = get_settings()
    upgrade(settings)
    started_server = settings.spark_remote == "local" and running_server(settings) is None
    try:
        return measure(settings)
    finally:
        close_session()
        if started_server:  # leave no background process behind
            stop_local_server(settings)


def _measure(settings, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    from spark_actors.session import get_session

    print(f"building two tables of {args.files} files, ~{args.mb} MB each …", file=sys.stderr, flush=True)
    merge_table = build_table(settings, "cd_merge", args.files, args.mb)
    compact_table = build_table(settings, "cd_compact", args.files, args.mb)
    print("adding delete files …", file=sys.stderr, flush=True)
    expected_deleted = add_deletes(compact_table, args.deleted)
    spark = get_session(settings)
    warm(spark, (merge_table, compact_table))

    merge_out, merge_s = run_action(settings, spark, "bench.cd_merge", "merge")
    compact_out, compact_s = run_action(settings, spark, "bench.cd_compact", "compact_deletes")
    for out in (merge_out, compact_out):
        if out["state"] != "succeeded":
            print(json.dumps(out, default=str), file=sys.stderr)
            return 1
    merge_mb = merge_out["bytes_in"] / 1e6
    compact_mb = compact_out["bytes_in"] / 1e6
    rows_deleted = compact_out["rows_in"] - compact_out["rows_out"]
    result = {
        "merge_files_in": merge_out["files_in"],
        "merge_mb_in": round(merge_mb, 1),
        "merge_seconds": round(merge_s, 2),
        "merge_mb_per_s": round(merge_mb / merge_s, 2),
        "compact_files_in": compact_out["files_in"],
        "compact_delete_files_removed": len(compact_out["plan"]["delete_files_removed"]),
        "compact_mb_in": round(compact_mb, 1),
        "compact_rows_in": compact_out["rows_in"],
        "compact_rows_deleted": rows_deleted,
        "compact_seconds": round(compact_s, 2),
        "compact_mb_per_s": round(compact_mb / compact_s, 2),
        "ratio_compact_to_merge": round((compact_mb / compact_s) / (merge_mb / merge_s), 3),
        "verified": compact_out["checksum_in"] == compact_out["checksum_out"] and rows_deleted == expected_deleted,
    }
    print(f"delete compaction (plan + Spark anti-joins + verify + commit): {result['compact_mb_per_s']:>7} MB/s "
          f"({result['compact_seconds']} s for {result['compact_mb_in']} MB, {result['compact_files_in']} files, "
          f"{result['compact_delete_files_removed']} delete files folded, {rows_deleted} of "
          f"{result['compact_rows_in']} rows deleted; independent count {expected_deleted})")
    print(f"baseline merge of the same data, same run:                    {result['merge_mb_per_s']:>7} MB/s "
          f"({result['merge_seconds']} s for {result['merge_mb_in']} MB, {result['merge_files_in']} files)")
    print(f"ratio compaction / merge: {result['ratio_compact_to_merge']}")
    if args.json:
        print(json.dumps(result))
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
