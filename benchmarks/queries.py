"""Queries before and after each layout action: small files, merged, sorted, z-ordered.

    python -m benchmarks.queries [--files 300] [--mb 40] [--target 1MiB] [--repeat 5] [--json]

One table of ``--files`` small files (~``--mb`` MB of the demo's event rows, one partition, one commit
per file, random ``user_id`` and ``amount``) is registered four times over the same metadata, so the
four layouts start from the very same files. Three go through the real action path with the same
``--target``: ``merge``, ``sort`` by ``user_id``, ``zorder`` on ``user_id, amount``; the fourth stays as
written (``small``). Then, on each layout, the same queries:

* ``point``:  ``user_id = <one existing value>`` (the sort column, and the first z-order column);
* ``range``:  ``user_id`` and ``amount`` each within 15% of their range (both z-order columns);
* ``agg``:    count, sums, min and max by ``region`` over every row;
* ``plan``:   planning a scan of the whole table (manifests only).

Files are planned by pyiceberg (``table.scan(row_filter=…).plan_files()``: partition and column-bound
pruning, the planning time), and the planned files are read by DuckDB (``read_parquet`` over that list
with the same filter, so row groups are pruned too): DuckDB's own Iceberg reader needs an extension
download, which this benchmark does not assume. Each figure is the median of ``--repeat`` runs after
one warm-up: wall time (planning + reading), files scanned, bytes scanned and skipped; and each as a
ratio to the small-file layout. The rows each query returns are compared across layouts (a digest of
the sorted ids, the aggregate's integers exactly and its float sums to 12 significant digits): any difference fails.

The issue's bars, reported as met or not: after zorder, the range filter reads ≤ 30% of the files the
merged (unsorted) layout reads; the full aggregation is ≥ 2× faster on each rewritten layout than on
the small files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from typing import Any

from benchmarks.compact_deletes import build_table, run_action, run_with_server

LAYOUTS = ("small", "merge", "sort", "zorder")
SORT_COLUMN = "user_id"
ZORDER_COLUMNS = "user_id, amount"
USER_ID_MAX = 2**40  # benchmarks.compact_deletes draws user_id from [0, 2^40) and amount from [0, 1000)


def _queries(point_user: int) -> dict[str, dict[str, Any]]:
    """Each query: its pyiceberg row filter (planning) and DuckDB SQL over ``files`` (reading)."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

    lo_u, hi_u = int(0.40 * USER_ID_MAX), int(0.55 * USER_ID_MAX)
    lo_a, hi_a = 400.0, 550.0
    return {
        "point": {"filter": EqualTo("user_id", point_user),
                  "sql": f"SELECT event_id FROM read_parquet($files) WHERE user_id = {point_user}"},
        "range": {"filter": And(And(GreaterThanOrEqual("user_id", lo_u), LessThanOrEqual("user_id", hi_u)),
                                And(GreaterThanOrEqual("amount", lo_a), LessThanOrEqual("amount", hi_a))),
                  "sql": f"SELECT event_id FROM read_parquet($files) WHERE user_id BETWEEN {lo_u} AND {hi_u} "
                         f"AND amount BETWEEN {lo_a} AND {hi_a}"},
        "agg": {"filter": AlwaysTrue(),
                "sql": "SELECT region, count(*) AS n, sum(event_id) AS ids, sum(amount) AS amount, "
                       "min(amount) AS lo, max(user_id) AS hi FROM read_parquet($files) GROUP BY region "
                       "ORDER BY region"},
        "plan": {"filter": AlwaysTrue(), "sql": None},
    }


def _result_key(name: str, rows: list[tuple]) -> str:
    """What must be equal in every layout: sorted ids, or the aggregate (float sums to 12 significant
    digits: DuckDB adds in parallel, in an order that changes from run to run)."""
    if name == "agg":
        rows = [(r[0], r[1], r[2], f"{r[3]:.12g}", r[4], r[5]) for r in rows]
    else:
        rows = sorted(rows)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16] + f"/{len(rows)} rows"


def run_query(table: Any, con: Any, name: str, query: dict[str, Any]) -> dict[str, Any]:
    """One run: plan with pyiceberg, read the planned files with DuckDB; figures and the result key."""
    started = time.perf_counter()
    tasks = list(table.scan(row_filter=query["filter"]).plan_files())
    planned = time.perf_counter()
    files = [t.file.file_path.removeprefix("file://") for t in tasks]
    rows: list[tuple] = []
    if query["sql"] is not None and files:
        rows = con.execute(query["sql"], {"files": files}).fetchall()
    finished = time.perf_counter()
    return {"wall_ms": (finished - started) * 1000, "plan_ms": (planned - started) * 1000, "files": len(files),
            "bytes": sum(int(t.file.file_size_in_bytes) for t in tasks),
            "result": _result_key(name, rows) if query["sql"] is not None else None}


def measure_layout(table: Any, queries: dict[str, dict[str, Any]], repeat: int) -> dict[str, dict[str, Any]]:
    """Every query on one layout: medians of ``repeat`` runs after a warm-up run."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    table.refresh()
    total = sum(int(t.file.file_size_in_bytes) for t in table.scan().plan_files())
    out: dict[str, dict[str, Any]] = {}
    for name, query in queries.items():
        run_query(table, con, name, query)  # warm: page cache, DuckDB's and pyiceberg's first-use costs
        runs = [run_query(table, con, name, query) for _ in range(repeat)]
        results = {r["result"] for r in runs}
        if len(results) != 1:
            raise AssertionError(f"{name}: one layout returned different rows run to run: {results}")
        first = runs[0]
        out[name] = {"wall_ms": round(statistics.median(r["wall_ms"] for r in runs), 2),
                     "plan_ms": round(statistics.median(r["plan_ms"] for r in runs), 2),
                     "files": first["files"], "bytes_scanned": first["bytes"],
                     "bytes_skipped": total - first["bytes"], "result": first["result"]}
    return out


def _copies(settings: Any, name: str, files: int, mb: int) -> dict[str, Any]:
    """``bench.q_<layout>`` for each layout, all registered over one freshly written table's metadata."""
    from pyiceberg.exceptions import NoSuchTableError

    from autooptimize.iceberg.catalog import get_catalog

    source = build_table(settings, name, files, mb)
    catalog = get_catalog(settings)
    tables = {}
    for layout in LAYOUTS:
        ident = f"bench.{name}_{layout}"
        try:
            catalog.drop_table(ident)  # registered copies: dropping never deletes the shared files
        except NoSuchTableError:
            pass
        tables[layout] = catalog.register_table(ident, source.metadata_location)
    return tables


def _ratios(figures: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, float | None]]]:
    base = figures["small"]
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for layout, queries in figures.items():
        out[layout] = {}
        for q, f in queries.items():
            b = base[q]
            out[layout][q] = {k: (round(f[k] / b[k], 3) if b[k] else None)
                              for k in ("wall_ms", "plan_ms", "files", "bytes_scanned")}
    return out


def _print(figures: dict, ratios: dict, actions: dict, bars: dict) -> None:
    print(f"{'layout':<7} {'query':<6} {'wall ms':>9} {'plan ms':>8} {'files':>6} {'MB read':>8} "
          f"{'MB skipped':>10}   ratio to small: wall / files / bytes")
    for layout, queries in figures.items():
        for q, f in queries.items():
            r = ratios[layout][q]
            print(f"{layout:<7} {q:<6} {f['wall_ms']:>9.1f} {f['plan_ms']:>8.1f} {f['files']:>6} "
                  f"{f['bytes_scanned'] / 1e6:>8.2f} {f['bytes_skipped'] / 1e6:>10.2f}   "
                  f"{r['wall_ms']} / {r['files']} / {r['bytes_scanned']}")
    for layout, a in actions.items():
        print(f"{layout}: {a['files_in']} → {a['files_out']} files in {a['seconds']} s")
    for bar, (met, text) in bars.items():
        print(f"[{'met' if met else 'NOT MET'}] {bar}: {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="small files written, one commit each")
    parser.add_argument("--mb", type=int, default=40, help="approximate MB of the small files")
    parser.add_argument("--target", default="1MiB", help="target file size of the three actions")
    parser.add_argument("--repeat", type=int, default=5, help="runs per query (the median is reported)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.files < 2 or args.mb < 1 or args.repeat < 1:
        print("--files must be at least 2, --mb and --repeat at least 1", file=sys.stderr)
        return 2
    return run_with_server(lambda settings: _measure(settings, args))


def _measure(settings: Any, args: argparse.Namespace) -> int:
    from spark_actors.session import get_session

    print(f"writing {args.files} small files, ~{args.mb} MB …", file=sys.stderr, flush=True)
    tables = _copies(settings, "q", args.files, args.mb)
    spark = get_session(settings)
    actions: dict[str, dict[str, Any]] = {}
    options = {"merge": None, "sort": {"sort_order": SORT_COLUMN}, "zorder": {"zorder_columns": ZORDER_COLUMNS}}
    for layout in ("merge", "sort", "zorder"):
        print(f"{layout} …", file=sys.stderr, flush=True)
        out, seconds = run_action(settings, spark, f"bench.q_{layout}", layout, target=args.target,
                                  options=options[layout])
        if out["state"] != "succeeded" or out["checksum_in"] != out["checksum_out"]:
            print(f"FAILED: {layout} ended {out['state']} ({out.get('reason')})", file=sys.stderr)
            return 1
        actions[layout] = {"files_in": out["files_in"], "files_out": out["files_out"], "seconds": round(seconds, 2)}

    tables["small"].refresh()
    first = tables["small"].scan(selected_fields=("user_id",), limit=1000).to_arrow().column(0).to_pylist()
    point_user = int(first[len(first) // 2])
    queries = _queries(point_user)
    print("querying …", file=sys.stderr, flush=True)
    figures = {layout: measure_layout(tables[layout], queries, args.repeat) for layout in LAYOUTS}
    for q in queries:
        results = {layout: figures[layout][q]["result"] for layout in LAYOUTS}
        if len(set(results.values())) != 1:
            print(f"FAILED: {q} returned different rows per layout: {results}", file=sys.stderr)
            return 1
    ratios = _ratios(figures)
    range_share = figures["zorder"]["range"]["files"] / max(1, figures["merge"]["range"]["files"])
    speedups = {layout: round(figures["small"]["agg"]["wall_ms"] / figures[layout]["agg"]["wall_ms"], 2)
                for layout in ("merge", "sort", "zorder")}
    bars = {
        "zorder range files ≤ 30% of merged": (
            range_share <= 0.30, f"{figures['zorder']['range']['files']} of {figures['merge']['range']['files']} "
                                 f"files ({range_share:.0%})"),
        "full aggregation ≥ 2× faster than small files": (
            min(speedups.values()) >= 2.0, ", ".join(f"{k} {v}×" for k, v in speedups.items())),
        "rows identical in every layout": (True, ", ".join(f"{q} {figures['small'][q]['result']}"
                                                             for q in queries if q != "plan")),
    }
    _print(figures, ratios, actions, bars)
    if args.json:
        print(json.dumps({"figures": figures, "ratios_to_small": ratios, "actions": actions,
                          "zorder_range_file_share_of_merge": round(range_share, 3), "agg_speedup": speedups,
                          "bars_met": {k: v[0] for k, v in bars.items()}, "point_user_id": point_user,
                          "files": args.files, "mb": args.mb, "target": args.target}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
