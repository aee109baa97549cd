"""Where the service and the replay of its own writes parted: merge by merge, partition by partition.

After ``python -m benchmarks.streaming --keep-home …`` (which prints the database and AO_HOME it kept):

    python -m benchmarks.replay_diff --database ao_bench_stream_XXXX --home /tmp/ao-bench-stream-XXXX \\
        [--target-size 128MiB] [--phase 0.5]

The service table's writer commits are replayed as ``benchmarks.streaming_predict`` replays them (the
tuning the service ran, the timings its own merges show, what its merges wrote against what they read, on
the listener's clock at one phase), with every
merge logged as it lands. Beside them, the service's own merges (``ao_actions``: when each started, the
files and bytes it read, the rule that planned it). Printed: per partition, the merges, files and MB each
side read; and the first merge where the two differ, with a few merges either side, each placed by the
writes that had landed before it. One merge reading other files is often where a whole hour takes
another path (docs/policy-history.md, "The listener's clock in the replay").
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table
from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.replay_clock import LISTENER_PASS_SECONDS
from autooptimize.domain.simulate import Merge, TimePartition, Write, simulate_policy
from autooptimize.domain.sizes import parse_size
from autooptimize.iceberg.catalog import default_catalog_properties
from autooptimize.services.autotune import default_tuning, table_writes
from autooptimize.services.learned_timings import LearnedTimings, learn_timings
from autooptimize.services.output_models import learned_output_model
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action
from autooptimize.storage.repositories import tracked_table
from benchmarks.streaming import end_excess_mse, live_files

#: Merges that read as many files, and bytes within this share of each other, are the same merge: a replay
#: weighs merged files by the table's fitted output model, so the same files weigh a little apart.
SAME_SHARE = 0.05


@dataclass(frozen=True)
class Step:
    """One merge of one side: the writes landed before it committed, the files and bytes it read, its rule."""

    writes: int
    files: int
    bytes_in: int
    rule: str

    def same(self, other: Step) -> bool:
        return (self.files == other.files
                and abs(self.bytes_in - other.bytes_in) <= SAME_SHARE * max(self.bytes_in, other.bytes_in))

    def __str__(self) -> str:
        return f"after write {self.writes}: {self.files} files, {self.bytes_in / 1e6:.2f} MB ({self.rule})"


def key_of(partition: Hashable) -> str:
    """The partition's key as ``ao_actions`` records it."""
    return partition.key if isinstance(partition, TimePartition) else str(partition)


def first_parting(live: Sequence[Step], replay: Sequence[Step]) -> int | None:
    """The index of the first merge where the two sides differ (one side may have ended); None: the same."""
    for i, (a, b) in enumerate(zip(live, replay, strict=False)):
        if not a.same(b):
            return i
    return None if len(live) == len(replay) else min(len(live), len(replay))


def report(live: dict[str, list[Step]], replay: dict[str, list[Step]], around: int = 2) -> list[str]:
    """The printed lines: per partition the totals of each side, then where they first parted."""
    lines = []
    for key in sorted(set(live) | set(replay)):
        a, b = live.get(key, []), replay.get(key, [])
        lines.append(f"partition {key}: service {len(a)} merges, {sum(s.files for s in a)} files, "
                     f"{sum(s.bytes_in for s in a) / 1e6:.1f} MB; replay {len(b)} merges, "
                     f"{sum(s.files for s in b)} files, {sum(s.bytes_in for s in b) / 1e6:.1f} MB")
        i = first_parting(a, b)
        if i is None:
            lines.append("  the same merges")
            continue
        lines.append(f"  first parted at merge {i + 1}:")
        for j in range(max(0, i - around), min(i + around + 1, max(len(a), len(b)))):
            left = str(a[j]) if j < len(a) else "-"
            right = str(b[j]) if j < len(b) else "-"
            lines.append(f"  {'>' if j == i else ' '} {j + 1:3d}  service {left:<52} replay {right}")
    return lines


def kept_settings(database: str, home: Path, target_size: str) -> Settings:
    """The settings of a kept ``benchmarks.streaming`` run: its database and AO_HOME, at its target size."""
    return Settings(database_url=f"postgresql+psycopg2://postgres@127.0.0.1:5432/{database}", home=home,
                    catalog="autooptimize", default_target_file_size=parse_size(target_size))


@dataclass(frozen=True)
class KeptRun:
    """A kept run's settings, its table, the table's writes and the time of its first, its tracked id, the
    tuning the service ran and the timings its own merges show (``learn_timings``)."""

    settings: Settings
    table: Table
    writes: list[Write]
    start_ms: int
    table_id: int
    tuning: PolicyTuning
    learned: LearnedTimings


def open_kept_run(database: str, home: Path, name: str, target_size: str) -> KeptRun | None:
    """The kept run's table ``name`` (:class:`KeptRun`); None when the run does not track it."""
    settings = kept_settings(database, home, target_size)
    table = load_catalog("autooptimize", **default_catalog_properties(settings)).load_table(name)
    writes, start_ms = table_writes(table)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, name)
        if row is None:
            return None
        tuning = default_tuning(settings, row)
        learned = learn_timings(session, row.id, (writes, start_ms), tuning)
    return KeptRun(settings, table, writes, start_ms, row.id, tuning, learned)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--database", required=True, help="the kept run's database (ao_bench_stream_…)")
    ap.add_argument("--home", required=True, type=Path, help="the kept run's AO_HOME (/tmp/ao-bench-stream-…)")
    ap.add_argument("--table", default="stream.events")
    ap.add_argument("--target-size", default="128MiB", help="the run's --target-size (default 128MiB)")
    ap.add_argument("--phase", type=float, default=0.0, help="the listener clock's phase, 0 ≤ s < 1 (default 0)")
    args = ap.parse_args(argv)
    if not args.home.is_dir():
        ap.error(f"--home {args.home} is not a directory: give the AO_HOME the kept run printed")
    if not 0 <= args.phase < LISTENER_PASS_SECONDS:
        ap.error(f"--phase must be seconds in [0, {LISTENER_PASS_SECONDS:g}), got {args.phase}")
    run = open_kept_run(args.database, args.home, args.table, args.target_size)
    if run is None:
        ap.error(f"{args.table} is not tracked in {args.database}: is it a kept benchmarks.streaming run?")
    settings, table, writes, start_ms, tuning, learned = (run.settings, run.table, run.writes, run.start_ms,
                                                           run.tuning, run.learned)
    with session_scope(settings) as session:
        done = session.execute(select(Action.finished_at, Action.partition_key, Action.files_in, Action.bytes_in,
                                      Action.plan).where(Action.table_id == run.table_id, Action.kind == "merge",
                                                         Action.state == "succeeded")
                               .order_by(Action.finished_at)).all()
    times = [w.at for w in writes]
    live: dict[str, list[Step]] = defaultdict(list)
    for finished, key, files, bytes_in, plan in done:
        rules = {str(p.get("rule")) for p in (plan or {}).get("partitions", [])}
        at = finished.timestamp() - start_ms / 1000
        live[str(key)].append(Step(bisect.bisect_right(times, at), files or 0, bytes_in or 0, ",".join(sorted(rules))))
    replay: dict[str, list[Step]] = defaultdict(list)

    def log(m: Merge) -> None:
        replay[key_of(m.partition)].append(Step(m.writes, m.files, m.bytes_in, m.rule))
    model = learned_output_model(table)
    final = live_files(table)
    figures = simulate_policy(writes, tuning, learned.latency, output_ratio=model.share,
                              file_overhead=model.file_overhead, start_delay=learned.start_delay,
                              timer_lag=learned.timer_lag, timer_every=LISTENER_PASS_SECONDS, timer_phase=args.phase,
                              on_merge=log, pace=learned.pace)
    start = "as it lands" if learned.start_delay is None else f"{learned.start_delay:.2f} s after the write"
    if learned.pace is not None and learned.pace.seconds_per_mb:
        start += f", runs {100 * learned.pace.seconds_per_mb:.2f} s longer per 100 MB over {learned.pace.reference_mb:.1f} MB"
    print(f"{len(writes)} writer commits; replay on the listener's clock at phase {args.phase:g} (latency "
          f"{learned.latency:.2f} s, planned {start}, timer lag {learned.timer_lag:.2f} s): "
          f"{figures.actions} merges, WA {figures.write_amplification:.3f}, {figures.end_files} files at the end "
          f"(excess MSE {figures.end_excess_mse / (1 << 40):.1f} MiB²); the service: {len(done)} merges, "
          f"{len(final)} files at the end (excess MSE {end_excess_mse(final, tuning.target):.1f} MiB²)")
    print("\n".join(report(live, replay)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
