"""REPLACE commit latency on a table with a long history, beside a plain pyiceberg append.

    python -m benchmarks.commit [--snapshots 500] [--rounds 20] [--json]

Builds a table partitioned by identity on 8 values with one append commit (one file, one manifest)
per snapshot, then alternates: one REPLACE of a partition's live files by one merged file through
autooptimize's commit (autooptimize.iceberg.commit.commit_replace), and one plain ``Table.append`` of a
small batch. Each REPLACE takes the 4 oldest live files of one partition, so the table keeps about as
many manifests as snapshots (the table is built with 2 × rounds extra commits to stay ≥ --snapshots).
Both are timed end to end (staging, manifest list, catalog swap). The Parquet output of
the REPLACE is written before its timer starts: this measures the commit, not the rewrite.
Prints p50/p95 of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from pyiceberg.catalog import load_catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from autooptimize.iceberg.commit import commit_replace, data_file_from_footer
from autooptimize.iceberg.commits import CommitStats

ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "p", IntegerType(), required=False),
                NestedField(3, "s", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
ARROW = schema_to_pyarrow(SCHEMA)


def _batch(first: int, rows: int, p: int) -> pa.Table:
    return pa.table({"id": list(range(first, first + rows)), "p": [p] * rows, "s": ["x" * 16] * rows}, schema=ARROW)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _partition_files(table, p):
    out = []
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        out += [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                if e.data_file.partition[0] == p]
    return out


def run(snapshots: int, rounds: int) -> dict:
    db = f"ao_bench_commit_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    home = tempfile.mkdtemp(prefix="ao-bench-commit-")
    catalog = load_catalog("bench", type="sql", uri=f"postgresql+psycopg2://postgres@127.0.0.1:5432/{db}",
                           warehouse=f"file://{home}")
    try:
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.commits", SCHEMA, partition_spec=SPEC)
        started = time.monotonic()
        for i in range(snapshots + 2 * rounds):
            table.append(_batch(i * 10, 10, i % 8))
        build_seconds = time.monotonic() - started
        replace_s: list[float] = []
        append_s: list[float] = []
        attempts: list[int] = []
        next_id = snapshots * 10
        for r in range(rounds):
            p = r % 8
            table.refresh()
            inputs = _partition_files(table, p)[:4]
            data = pa.concat_tables([pq.read_table(f.file_path.removeprefix("file://")).cast(ARROW) for f in inputs])
            path = f"{table.location()}/data/p={p}/merged-{uuid.uuid4().hex}.parquet"
            os.makedirs(os.path.dirname(path.removeprefix("file://")), exist_ok=True)
            pq.write_table(data, path.removeprefix("file://"))
            output = data_file_from_footer(table, path, inputs[0].spec_id, inputs[0].partition)
            stats = CommitStats()
            t0 = time.monotonic()
            commit_replace(table, inputs, [output], {"autooptimize.action-id": f"bench-{r}"}, stats=stats)
            replace_s.append(time.monotonic() - t0)
            attempts.append(stats.attempts)
            t0 = time.monotonic()
            table.append(_batch(next_id, 10, p))
            append_s.append(time.monotonic() - t0)
            next_id += 10
        table.refresh()
        manifests = len(table.current_snapshot().manifests(table.io))
        result = {
            "snapshots": len(table.metadata.snapshots), "manifests": manifests, "rounds": rounds,
            "build_seconds": round(build_seconds, 1),
            "replace_p50_s": round(_pct(replace_s, 0.5), 4), "replace_p95_s": round(_pct(replace_s, 0.95), 4),
            "append_p50_s": round(_pct(append_s, 0.5), 4), "append_p95_s": round(_pct(append_s, 0.95), 4),
            "replace_attempts_max": max(attempts),
            "replace_mean_s": round(statistics.fmean(replace_s), 4),
        }
        result["ratio_p50"] = round(result["replace_p50_s"] / result["append_p50_s"], 2)
        result["ratio_p95"] = round(result["replace_p95_s"] / result["append_p95_s"], 2)
        return result
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=500, help="at least this many snapshots and manifests")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.snapshots, args.rounds)
    if args.json:
        print(json.dumps(result))
        return
    print(f"table: {result['snapshots']} snapshots, {result['manifests']} manifests (built in {result['build_seconds']} s)")
    print(f"REPLACE commit p50 {result['replace_p50_s']:.3f} s  p95 {result['replace_p95_s']:.3f} s "
          f"(max attempts {result['replace_attempts_max']})")
    print(f"append (baseline) p50 {result['append_p50_s']:.3f} s  p95 {result['append_p95_s']:.3f} s")
    print(f"ratio REPLACE/append: p50 {result['ratio_p50']}x  p95 {result['ratio_p95']}x")


if __name__ == "__main__":
    main()
