"""The listener's recheck of settled partitions (``services.submit_decided.settled_partitions``) at scale,
with the late-horizon finish beside it off.

    python -m benchmarks.settled_query [--tables 1000 --tables 10000] [--hours 48] [--repeat 7] [--json]

The listener runs this query on every pass, up to once a second. Per size, a throw-away PostgreSQL
database gets ``--tables`` tracked tables of ``--hours`` hourly partitions each, as the listener leaves
them in a steady state:

* every hour has its ordinal and a late lag of 0–2 (the late horizon is 2), and each spec's span is in
  ``ao_spec_spans``;
* the two newest hours of each table were left alone as written to (``skip:live_wait``), written 10 s
  ago, so they are neither quiet nor cold yet;
* one hour ten behind the newest was also left alone as written to. It is past the late horizon, so
  the recheck must hand it over, once per table.

Printed per size: the median and best time of the query with ``AO_LATE_HORIZON_FINISH`` on (the
default) and off, and their ratio. Exit code 1 when the recheck with the rule on did not hand over
exactly one hour per table (it did no work, or the wrong work).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.services.submit_decided import settled_partitions
from autooptimize.storage.db import session_scope, upgrade
from benchmarks.scratch import drop_scratch_database

BASE_ORDINAL = 500_000  # hours since 1970
FILL = [
    """INSERT INTO ao_tracked_tables (catalog, identifier, target_file_size, tolerance, min_input_files,
           priority_class, weight, allowed_actions, min_interval_seconds, enabled)
       SELECT 'default', 'bench.t' || g, 8388608, 2097152, 2, 'normal', 1, '["merge"]'::jsonb, 0, true
       FROM generate_series(1, :tables) g""",
    """INSERT INTO ao_partition_stats (table_id, spec_id, partition_key, partition_values, n_files, sse,
           total_bytes, small_files, small_bytes, updated_at, last_write_at, ordinal, late_lag, last_decision,
           last_decision_at)
       SELECT t.id, 0, 'ts_hour=' || h, '{}'::jsonb, 5, 0, 1000, 5, 1000, now() - interval '61 seconds',
              now() - interval '10 seconds', :base + h, h % 3,
              CASE WHEN h >= :hours - 1 OR h = :hours - 10 THEN 'skip:live_wait' ELSE 'skip:below_excess' END,
              now() - interval '60 seconds'
       FROM ao_tracked_tables t, generate_series(1, :hours) h""",
    """INSERT INTO ao_spec_spans (table_id, spec_id, newest, oldest, horizon)
       SELECT table_id, spec_id, max(ordinal), min(ordinal), max(late_lag) FROM ao_partition_stats
       GROUP BY table_id, spec_id""",
    "ANALYZE ao_partition_stats",
    "ANALYZE ao_tracked_tables",
    "ANALYZE ao_spec_spans",
]


def _timed(settings: Settings, repeat: int) -> tuple[list[float], int]:
    settled_partitions(settings)  # warm: connection pool, plan cache
    times, found = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = len(settled_partitions(settings))
        times.append(time.perf_counter() - started)
    return times, found


def measure(tables: int, hours: int, repeat: int) -> dict[str, Any]:
    db_name = f"ao_bench_settled_{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="ao-bench-settled-"))
    settings = Settings(database_url=f"postgresql+psycopg2://postgres@localhost:5432/{db_name}", home=home)
    try:
        upgrade(settings)
        with session_scope(settings) as session:
            for statement in FILL:
                session.execute(text(statement), {"tables": tables, "hours": hours, "base": BASE_ORDINAL})
        on, handed_on = _timed(settings, repeat)
        off, handed_off = _timed(settings.model_copy(update={"late_horizon_finish": False}), repeat)
    finally:
        drop_scratch_database(db_name)
        shutil.rmtree(home, ignore_errors=True)
    return {"tables": tables, "hours": hours, "partitions": tables * hours, "repeat": repeat,
            "on_ms": {"median": statistics.median(on) * 1000, "best": min(on) * 1000},
            "off_ms": {"median": statistics.median(off) * 1000, "best": min(off) * 1000},
            "ratio_median": statistics.median(on) / statistics.median(off),
            "handed_over_on": handed_on, "handed_over_off": handed_off}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tables", type=int, action="append", help="tracked tables (repeatable); default 1000 and 10000")
    ap.add_argument("--hours", type=int, default=48, help="hourly partitions per table (at least 12)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = args.tables or [1000, 10000]
    if any(n < 1 for n in sizes):
        ap.error(f"--tables must be at least 1, got {sizes}")
    if args.hours < 12:
        ap.error(f"--hours must be at least 12 (one waiting hour ten behind the newest), got {args.hours}")
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    results = [measure(n, args.hours, args.repeat) for n in sizes]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(f"{r['tables']} tables × {r['hours']} hours ({r['partitions']} partitions): with the late-horizon "
                  f"finish {r['on_ms']['median']:.1f} ms (best {r['on_ms']['best']:.1f}), without "
                  f"{r['off_ms']['median']:.1f} ms (best {r['off_ms']['best']:.1f}): {r['ratio_median']:.2f}×; "
                  f"{r['handed_over_on']} hours past the horizon handed over (without: {r['handed_over_off']})")
    return 0 if all(r["handed_over_on"] == r["tables"] and r["handed_over_off"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
