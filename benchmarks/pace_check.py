"""Does a borrowed pace predict a table of large merges better than a borrowed median? On kept live runs.

After ``python -m benchmarks.streaming --keep-home …`` for the table (say m04: merges of about 140 MB) and
for one or more lenders (members whose merges read other sizes):

    python -m benchmarks.pace_check --database ao_bench_stream_T --home /tmp/ao-bench-stream-T \\
        --lender ao_bench_stream_A --lender ao_bench_stream_B [--target-size 128MiB]

The table's writer commits are replayed as AutoAnalyze replays a table with too few merges of its own: with
the timings its lenders' merges show (``learned_timings.timings_of_merges`` over the most recent merges of
every lender database together, as ``borrowed_timings`` reads one service's), the table's own timer lag and
output model, on the listener's clock. Three replays:

* **borrowed median** (the baseline): every merge lands the lenders' median latency after its write, as
  before the pace (``pace=None``);
* **borrowed pace**: the same, each merge's run grown or shrunk by what it reads (``domain.pace``);
* **own timings**: the table's own merges' (``learn_timings``), what the replay gets once it has them.

Printed: each replay's mean live files and write amplification beside the live run's (from the table's
snapshots), live / replay, and the paced replay's error over the median's as a ratio. Fails (exit 1)
when a database holds no succeeded merge: nothing was measured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autooptimize.domain.replay_clock import simulate_on_clock
from autooptimize.domain.simulate import Figures
from autooptimize.services.autotune import realised_since
from autooptimize.services.learned_timings import (
    LATENCY_ACTIONS,
    LearnedTimings,
    lendable_merges,
    timings_of_merges,
)
from autooptimize.services.output_models import learned_output_model
from autooptimize.storage.db import session_scope
from benchmarks.replay_diff import kept_settings, open_kept_run


def lenders_merges(databases: Sequence[str], home: Path, target: str) -> list[Any]:
    """The most recent lendable merges of every database, together (each database's newest
    :data:`LATENCY_ACTIONS`, then the newest of them all, as one service's query reads them)."""
    rows: list[Any] = []
    for db in databases:
        with session_scope(kept_settings(db, home, target)) as session:
            got = session.execute(lendable_merges(None)).all()
        if not got:
            raise SystemExit(f"--lender {db}: no succeeded merge that recorded its prompt: nothing to borrow")
        rows += got
    rows.sort(key=lambda r: r[2], reverse=True)  # by finished_at, newest first
    return rows[:LATENCY_ACTIONS]


def _row(name: str, f: Figures, live: dict[str, Any]) -> str:
    files, wa = live["mean_live_files"], live["write_amplification"]
    return (f"{name:<16} {f.mean_live_files:>8.2f} {f.write_amplification:>8.3f}   live/replay files "
            f"{files / f.mean_live_files:.3f}, WA {wa / f.write_amplification if f.write_amplification else float('nan'):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--database", required=True, help="the table's kept run's database (ao_bench_stream_…)")
    ap.add_argument("--home", required=True, type=Path, help="the table's kept run's AO_HOME")
    ap.add_argument("--lender", action="append", required=True, help="a lender run's database (repeatable)")
    ap.add_argument("--table", default="stream.events")
    ap.add_argument("--target-size", default="128MiB", help="the table run's --target-size (default 128MiB)")
    args = ap.parse_args(argv)
    if not args.home.is_dir():
        ap.error(f"--home {args.home} is not a directory: give the AO_HOME the kept run printed")
    run = open_kept_run(args.database, args.home, args.table, args.target_size)
    if run is None:
        ap.error(f"{args.table} is not tracked in {args.database}: is it a kept benchmarks.streaming run?")
    table, writes, tuning, own = run.table, run.writes, run.tuning, run.learned
    if own.merges == 0:
        print(f"{args.database}: the table has no succeeded merge: nothing to compare", file=sys.stderr)
        return 1
    lent = timings_of_merges(lenders_merges(args.lender, args.home, args.target_size), tuning.settle_seconds)
    if lent is None:
        print("the lenders have too few merges to lend timings", file=sys.stderr)
        return 1
    lent = replace(lent, timer_lag=own.timer_lag, timer_merges=own.timer_merges)  # the table's own, as suggest
    model = learned_output_model(table)
    live = realised_since(table)

    def replay(t: LearnedTimings, paced: bool) -> Figures:
        return simulate_on_clock(writes, tuning, t.latency, timer_lag=t.timer_lag, output_ratio=model.share,
                                 file_overhead=model.file_overhead, start_delay=t.start_delay,
                                 pace=t.pace if paced else None)
    median, paced, mine = replay(lent, False), replay(lent, True), replay(own, True)

    def describe(t: LearnedTimings) -> str:
        pace = "" if t.pace is None else (f", {100 * t.pace.seconds_per_mb:.2f} s per 100 MB over "
                                          f"{t.pace.reference_mb:.1f} MB, floor {t.pace.floor_seconds:.2f} s")
        return f"latency {t.latency:.2f} s, start {t.start_delay:.2f} s, {t.merges} merges{pace}"
    print(f"{args.table}: {len(writes)} writer commits; live mean live files {live['mean_live_files']:.2f}, "
          f"WA {live['write_amplification']:.3f}")
    print(f"borrowed from {', '.join(args.lender)}: {describe(lent)}")
    print(f"own: {describe(own)}")
    print(f"{'replay':<16} {'files':>8} {'WA':>8}")
    for name, f in (("borrowed median", median), ("borrowed pace", paced), ("own timings", mine)):
        print(_row(name, f, live))
    err = {n: abs(live["mean_live_files"] / f.mean_live_files - 1) for n, f in (("median", median), ("pace", paced))}
    ratio = err["pace"] / err["median"] if err["median"] else float("nan")
    print(f"files error of the borrowed pace over the borrowed median's (baseline): {err['pace']:.3f} / "
          f"{err['median']:.3f} = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
