"""Sort, zorder and delete-compaction throughput on ≥100 MB, each beside the plain merge of the same data in the same run.

    python -m benchmarks.rewrites [--files 100] [--mb 110] [--target 32MiB] [--deleted 0.05] [--s3] [--json]

With ``--s3`` every kind runs again on the same data in tables on an ``s3://`` warehouse served on
loopback (moto's S3 server), and each kind's s3 MB/s is printed beside its file:// MB/s.

Four tables get identical data files (one partition, ``--files`` files, ~``--mb`` MB, random
``user_id``, so nothing is in order). One is merged, one is sorted by ``user_id`` (the option
``sort_order``: range-partitioned on it, sorted within each file), one is z-ordered on ``user_id`` and
``amount`` (range-partitioned on the z-value, sorted by it within each file), and one gets the delete files of
``benchmarks.compact_deletes`` (position deletes of ``--deleted`` of each file's rows, two equality
delete files) and is compacted. All four go through the real action path (plan, Spark Connect
rewrite, verification of rows and checksums, REPLACE commit) with the same ``--target`` file size:
32 MiB by default, so that the default partition (133 MB on disk) is written as several files and the sort really
range-partitions (at one output file it would only sort within it). Each figure is MB of input data
files per second of the action; the ratios are sort / merge and compaction / merge. Before the
timed actions every table's files are read once and each kind runs once on a 3 MB copy, so no
action pays for a cold JVM code path that another has already warmed.

Checked, loudly: every action succeeded with equal checksums in and out; merge, sort and zorder keep every
row; the compaction removes exactly the rows an independent count says the deletes remove; the
sorted table's data files (all new) hold pairwise disjoint ``user_id`` ranges by their manifest
bounds, and each is sorted within (its ``user_id`` column read back after the timing).

Measured on the 2-core development machine (defaults: 100 files, 133.3 MB and 2,746,200 rows per table,
32 MiB target), ``python -m benchmarks.rewrites --s3`` on 2026-11-25 (inputs read directly and ahead):

    merge              31.23 MB/s   100 → 3 files (3 groups)
    sort by user_id    18.64 MB/s   100 → 3 files (1 group, disjoint ranges)   sort / merge 0.60
    zorder             20.75 MB/s   100 → 3 files (1 group)                    zorder / merge 0.66
    delete compaction  26.66 MB/s   100 → 4 files (12 delete files, ~5.7% rows) compaction / merge 0.85

    on s3:// (loopback)   s3 MB/s  file MB/s  s3 / file
    merge                    9.48      31.23       0.30
    sort                     9.67      18.64       0.52
    zorder                   9.22      20.75       0.44
    compact                  9.50      26.66       0.36

The machine's own spread is wide: two file:// runs of the same code the same hour gave merge 62.3 and
46.4 MB/s, sort / merge 0.55 both times, zorder / merge 0.63 and 0.78.
All four run on the pyarrow path here (on s3:// as one Spark task per group). The merge planner (FFD)
cuts three groups of one output each; sort and zorder rewrite the whole partition as one group cut into
disjoint ranges; the compaction is one group whose output count comes from the raw input bytes (4).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pyarrow.parquet as pq

from benchmarks.compact_deletes import add_deletes, build_table, run_action, run_with_server, warm

SORT_COLUMN = "user_id"
ZORDER_COLUMNS = "user_id, amount"  # both random: z-ordered from scratch (the zorder row; issue 15)
KINDS = ("merge", "sort", "zorder", "compact")


def check_sorted(table, column: str = SORT_COLUMN) -> dict:  # type: ignore[no-untyped-def]
    """Output ranges of ``column`` pairwise disjoint (manifest bounds) and each file sorted; raises if not."""
    files = table.inspect.files()
    data = [r for r in files.select(["content", "file_path", "record_count", "readable_metrics"]).to_pylist()
            if r["content"] == 0]
    spans = sorted((r["readable_metrics"][column]["lower_bound"], r["readable_metrics"][column]["upper_bound"],
                    r["file_path"]) for r in data)
    if any(lo is None or hi is None for lo, hi, _ in spans):
        raise AssertionError(f"sorted output without {column} bounds: {spans}")
    for (_, hi, a), (lo, _, b) in zip(spans, spans[1:], strict=False):
        if not hi < lo:
            raise AssertionError(f"sorted outputs overlap on {column}: {a} ends at {hi}, {b} starts at {lo}")
    for _, _, path in spans:  # within each file: one int64 column, a few MB; after the timing
        with table.io.new_input(path).open() as stream:
            values = pq.read_table(stream, columns=[column]).column(0).to_numpy()
        if len(values) > 1 and not bool(np.all(values[1:] >= values[:-1])):
            raise AssertionError(f"{path} is not sorted by {column}")
    return {"files": len(spans), "ranges": [[lo, hi] for lo, hi, _ in spans]}


def _figures(out: dict, seconds: float) -> dict:
    mb = out["bytes_in"] / 1e6
    return {
        "mb_in": round(mb, 1),
        "seconds": round(seconds, 2),
        "mb_per_s": round(mb / seconds, 2),
        "files_in": out["files_in"],
        "files_out": out["files_out"],
        "rows_in": out["rows_in"],
        "rows_out": out["rows_out"],
        "groups": sum(len(p.get("groups", ())) for p in (out.get("plan") or {}).get("partitions", ())),
    }


def s3_store(settings) -> tuple[str, object]:  # type: ignore[no-untyped-def]
    """A real S3-protocol server on loopback (moto's server mode, installed by the dev extra) with a
    bucket, its endpoint and keys given to AO_CATALOG as FileIO properties; (warehouse URI, server)."""
    import os

    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    props = {"s3.endpoint": f"http://{host}:{port}", "s3.access-key-id": "bench", "s3.secret-access-key": "bench-secret",
             "s3.region": "us-east-1", "s3.path-style-access": "true"}
    boto3.client("s3", endpoint_url=props["s3.endpoint"], aws_access_key_id="bench", aws_secret_access_key="bench-secret",
                 region_name="us-east-1").create_bucket(Bucket="bench")
    prefix = f"PYICEBERG_CATALOG__{settings.catalog.upper().replace('-', '_')}__"
    for key, value in props.items():
        os.environ[prefix + key.replace(".", "__").replace("-", "_").upper()] = value
    return "s3://bench/wh", server


def _actions(settings, spark, prefix: str, target: str) -> dict[str, tuple[dict, float]]:  # type: ignore[no-untyped-def]
    """Merge, sort and compaction, in that order, on the tables ``bench.<prefix>merge|sort|compact``."""
    return {
        "merge": run_action(settings, spark, f"bench.{prefix}merge", "merge", target=target),
        "sort": run_action(settings, spark, f"bench.{prefix}sort", "sort", target=target,
                           options={"sort_order": SORT_COLUMN}),
        "zorder": run_action(settings, spark, f"bench.{prefix}zorder", "zorder", target=target,
                             options={"zorder_columns": ZORDER_COLUMNS}),
        "compact": run_action(settings, spark, f"bench.{prefix}compact", "compact_deletes", target=target),
    }


def _fail(what: str, out: dict) -> int:
    print(f"FAILED: {what}", file=sys.stderr)
    print(json.dumps(out, default=str), file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--mb", type=int, default=110)
    parser.add_argument("--target", default="32MiB", help="target file size of all four actions")
    parser.add_argument("--deleted", type=float, default=0.05, help="fraction of each file's rows position-deleted")
    parser.add_argument("--s3", action="store_true",
                        help="also run every kind on an s3:// warehouse served on loopback, beside file://")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    return run_with_server(lambda settings: _measure(settings, args))


def _measure(settings, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    if not args.s3:
        return _measure_file(settings, args, None)
    # before any catalog is opened: the process opens AO_CATALOG once, with the store's properties
    warehouse, server = s3_store(settings)
    try:
        return _measure_file(settings, args, warehouse)
    finally:
        server.stop()  # type: ignore[attr-defined]


def _measure_file(settings, args: argparse.Namespace, warehouse: str | None) -> int:  # type: ignore[no-untyped-def]
    from spark_actors.session import get_session

    print(f"building {len(KINDS)} tables of {args.files} files, ~{args.mb} MB each …", file=sys.stderr, flush=True)
    tables = {kind: build_table(settings, f"rw_{kind}", args.files, args.mb) for kind in KINDS}
    print("adding delete files …", file=sys.stderr, flush=True)
    expected_deleted = add_deletes(tables["compact"], args.deleted)
    # The same, small, for a warm-up of each action (a long-running actor has run each kind before).
    add_deletes({kind: build_table(settings, f"rw_warm_{kind}", 6, 3) for kind in KINDS}["compact"], args.deleted)
    spark = get_session(settings)
    warm(spark, tables.values())
    print("warming each action on a 3 MB table …", file=sys.stderr, flush=True)
    for name, out in _actions(settings, spark, "rw_warm_", "1MiB").items():
        if out[0]["state"] != "succeeded":
            return _fail(f"warm-up {name} ended {out[0]['state']} ({out[0].get('reason')})", out[0])

    runs = _actions(settings, spark, "rw_", args.target)
    for name, (out, _) in runs.items():
        if out["state"] != "succeeded":
            return _fail(f"{name} ended {out['state']} ({out.get('reason')})", out)
        if not out["checksum_in"] or out["checksum_in"] != out["checksum_out"]:
            return _fail(f"{name}: checksum in {out['checksum_in']} != out {out['checksum_out']}", out)
    for name in ("merge", "sort", "zorder"):
        out = runs[name][0]
        if out["rows_in"] != out["rows_out"] or out["files_in"] != args.files:
            return _fail(f"{name}: rows {out['rows_in']} → {out['rows_out']}, {out['files_in']} files in", out)
    compact_out = runs["compact"][0]
    rows_deleted = compact_out["rows_in"] - compact_out["rows_out"]
    if rows_deleted != expected_deleted:
        return _fail(f"compaction removed {rows_deleted} rows; the deletes remove {expected_deleted}", compact_out)

    figures = {name: _figures(out, seconds) for name, (out, seconds) in runs.items()}
    try:
        figures["sort"]["check"] = check_sorted(tables["sort"].refresh())
    except AssertionError as exc:
        return _fail(str(exc), runs["sort"][0])
    if figures["sort"]["check"]["files"] != figures["sort"]["files_out"]:
        return _fail(f"sorted table holds {figures['sort']['check']['files']} data files, "
                     f"the action wrote {figures['sort']['files_out']}", runs["sort"][0])
    figures["compact"]["delete_files_removed"] = len(compact_out["plan"]["delete_files_removed"])
    figures["compact"]["rows_deleted"] = rows_deleted
    merge_rate = figures["merge"]["mb_per_s"]
    result = {
        **figures,
        "target": args.target,
        "ratio_sort_to_merge": round(figures["sort"]["mb_per_s"] / merge_rate, 3),
        "ratio_zorder_to_merge": round(figures["zorder"]["mb_per_s"] / merge_rate, 3),
        "ratio_compact_to_merge": round(figures["compact"]["mb_per_s"] / merge_rate, 3),
        "verified": True,
    }

    def line(label: str, f: dict, extra: str = "") -> str:
        return (f"{label:<19} {f['mb_per_s']:>7} MB/s  ({f['seconds']} s for {f['mb_in']} MB, "
                f"{f['files_in']} → {f['files_out']} files in {f['groups']} group(s), "
                f"{f['rows_in']} → {f['rows_out']} rows{extra})")

    print(line("merge", figures["merge"]))
    print(line(f"sort by {SORT_COLUMN}", figures["sort"],
               f"; {figures['sort']['check']['files']} output files, {SORT_COLUMN} ranges disjoint, each sorted"))
    print(line("zorder", figures["zorder"], f"; on {ZORDER_COLUMNS}"))
    print(line("delete compaction", figures["compact"],
               f"; {figures['compact']['delete_files_removed']} delete files folded, independent count "
               f"{expected_deleted}"))
    print(f"ratio sort / merge:       {result['ratio_sort_to_merge']}")
    print(f"ratio zorder / merge:     {result['ratio_zorder_to_merge']}")
    print(f"ratio compaction / merge: {result['ratio_compact_to_merge']}")
    print(f"(same run, same data files, target {args.target}; plan + Spark rewrite + verify + commit each)")
    if warehouse is not None:
        code = _measure_s3(settings, spark, args, warehouse, figures, result)
        if code:
            return code
    if args.json:
        result["sort"] = {k: v for k, v in result["sort"].items() if k != "check"} | {
            "sorted_files": figures["sort"]["check"]["files"]}
        print(json.dumps(result))
    return 0


def _measure_s3(settings, spark, args: argparse.Namespace, warehouse: str,  # type: ignore[no-untyped-def]
                local: dict, result: dict) -> int:
    """Every kind again on the same data in ``s3://`` tables (loopback S3 server), beside ``local``."""
    print(f"building the {len(KINDS)} tables again on {warehouse} …", file=sys.stderr, flush=True)
    tables = {kind: build_table(settings, f"rw_s3_{kind}", args.files, args.mb, f"{warehouse}/rw_s3_{kind}")
              for kind in KINDS}
    expected_deleted = add_deletes(tables["compact"], args.deleted)  # random rows: not file://'s, counted here
    warm_compact = {kind: build_table(settings, f"rw_s3_warm_{kind}", 6, 3, f"{warehouse}/rw_s3_warm_{kind}")
                    for kind in KINDS}["compact"]
    add_deletes(warm_compact, args.deleted)
    # 4 MiB, not the file:// warm-up's 1 MiB: an s3:// table has no Spark calibration sample before its first
    # rewrite, so the plan sees raw bytes, and ~0.8 MB files are already "done" (≥ 75%) at a 1 MiB target
    for name, out in _actions(settings, spark, "rw_s3_warm_", "4MiB").items():
        if out[0]["state"] != "succeeded":
            return _fail(f"s3 warm-up {name} ended {out[0]['state']} ({out[0].get('reason')})", out[0])
    runs = _actions(settings, spark, "rw_s3_", args.target)
    s3: dict[str, dict] = {}
    for name, (out, seconds) in runs.items():
        if out["state"] != "succeeded" or out["checksum_in"] != out["checksum_out"]:
            return _fail(f"s3 {name} ended {out['state']} ({out.get('reason')})", out)
        rows_out = out["rows_in"] - expected_deleted if name == "compact" else local[name]["rows_out"]
        if (out["rows_in"], out["rows_out"]) != (local[name]["rows_in"], rows_out):
            return _fail(f"s3 {name}: rows {out['rows_in']} → {out['rows_out']}, expected "
                         f"{local[name]['rows_in']} → {rows_out}", out)
        s3[name] = _figures(out, seconds)
    print(f"\n{'on s3:// (loopback)':<19} {'s3 MB/s':>9} {'file MB/s':>10} {'s3 / file':>10}")
    for name in KINDS:
        ratio = round(s3[name]["mb_per_s"] / local[name]["mb_per_s"], 3)
        s3[name]["ratio_to_file"] = ratio
        print(f"{name:<19} {s3[name]['mb_per_s']:>9} {local[name]['mb_per_s']:>10} {ratio:>10}")
    print("(same run, same data; on s3:// each group is a pyarrow rewrite run as a Spark task)")
    result["s3"] = s3
    return 0


if __name__ == "__main__":
    sys.exit(main())
