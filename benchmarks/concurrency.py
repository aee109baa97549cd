"""Group jobs in flight: a whole-table merge of P partitions (one group each) with 1 job in flight beside
the same merge of an identical table with N in flight, on the same Spark Connect session.

    python -m benchmarks.concurrency [--partitions 8] [--files 6] [--rows 40000] [--concurrency 2] [--rounds 2]

Both contenders go through the real action path (plan, rewrite, verify, one REPLACE commit); rounds
alternate which runs first so a warmer JVM favours neither. Prints seconds of the rewrite phase and
the ratio (N in flight / 1 in flight; below 1 means concurrency helps).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

import pyarrow as pa


def build_table(settings, name: str, partitions: int, files: int, rows: int):  # type: ignore[no-untyped-def]
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

    from autooptimize.iceberg.catalog import get_catalog

    catalog = get_catalog(settings)
    try:
        catalog.create_namespace("bench")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table(name)
    except NoSuchTableError:
        pass
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "day", DateType(), required=True),
                    NestedField(3, "v", StringType()), NestedField(4, "x", DoubleType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
    table = catalog.create_table(name, schema=schema, partition_spec=spec)
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("day", pa.date32(), nullable=False),
                       pa.field("v", pa.string()), pa.field("x", pa.float64())])
    next_id = 0
    for p in range(partitions):
        day = dt.date(2026, 1, 1) + dt.timedelta(days=p)
        for _ in range(files):
            ids = range(next_id, next_id + rows)
            table.append(pa.table({"id": list(ids), "day": [day] * rows, "v": [f"value-{i}" for i in ids],
                                   "x": [i * 0.5 for i in ids]}, schema=arrow))
            next_id += rows
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from benchmarks.compact_deletes import run_with_server

    return run_with_server(lambda settings: _measure(settings, args))


def _measure(base, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    from autooptimize.services import actions, tracking
    from spark_actors.session import get_session

    spark = get_session(base)
    spark.range(1_000_000).selectExpr("sum(id)").collect()  # warm the JVM
    seconds: dict[int, list[float]] = {1: [], args.concurrency: []}
    for round_ in range(args.rounds):
        order = [1, args.concurrency] if round_ % 2 == 0 else [args.concurrency, 1]
        for n in order:
            name = f"bench.concurrency_{n}"
            build_table(base, name, args.partitions, args.files, args.rows)
            settings = base.model_copy(update={"rewrite_concurrency": n})
            tracking.track(settings, name, target_file_size="128MiB")
            action_id = actions.submit(settings, name, dispatch=False)
            out = actions.execute(settings, action_id, spark=spark)
            if out["state"] != "succeeded" or out["checksum_in"] != out["checksum_out"]:
                print(json.dumps(out, default=str), file=sys.stderr)
                return 1
            rewrite = actions.get_outcome(settings, action_id)
            with_timings = _timings(settings, rewrite["id"])
            seconds[n].append(with_timings["rewrite"])
            print(f"round {round_ + 1}: {n} in flight: rewrite {with_timings['rewrite']:.2f} s "
                  f"({out['files_in']} → {out['files_out']} files, {len(out['plan']['partitions'])} groups)",
                  flush=True)
    one, many = sum(seconds[1]), sum(seconds[args.concurrency])
    print(f"baseline, 1 in flight: {one:.2f} s; {args.concurrency} in flight: {many:.2f} s; "
          f"ratio {many / one:.2f}")
    return 0


def _timings(settings, action_id: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from autooptimize.storage.db import session_scope
    from autooptimize.storage.repositories import get_action

    with session_scope(settings) as session:
        action = get_action(session, action_id)
        assert action is not None
        return dict(action.timings or {})


if __name__ == "__main__":
    sys.exit(main())
