"""Streaming ingest with the service running beside the writer, against a blocking periodic bin-pack.

    python -m benchmarks.streaming [--commits 300] [--rate 1.6] [--seed 7] [--json]
                                   [--target-size 8MiB] [--compact-every 20] [--baseline-rule iceberg|all]
                                   [--member m00 [--variant K]]

``--member`` replays a member of ``benchmarks.trace_family`` (its sizes, late data, rate and target) instead
of the trace below, a daily member into a table partitioned by ``day(ts)`` (its rows' instants anywhere in
their day; the live-file lags below are then in days); ``--commits`` keeps its first commits; ``--variant K`` draws its commits from
another seed (``benchmarks.trace_family.variant``). ``python -m benchmarks.policy_sim
--member m00 --commits N`` simulates the same commits.

One seeded trace (benchmarks/trace.py) goes into two tables of a table partitioned by ``hour(ts)``: every
commit appends one file per touched partition through pyiceberg (``Table.append``), paced at ``--rate``
commits/s; most rows land in the current simulated hour (one simulated hour every ``--commits-per-hour``
commits), late data in the three previous hours; file sizes log-normal around 200 KB with rare bursts of
a few MB. Rows carry unique ids.

Service run. The benchmark creates a PostgreSQL database of its own on 127.0.0.1:5432 (dropped at the end),
an AO_HOME in a temporary directory (warehouse, logs, Spark Connect server) and uses a Redis db of its own
(``--redis-url``, flushed before and after). It creates the table, starts ``autooptimize up --no-flower``
as a subprocess with AO_AUTO_TRACK set to the table, AO_DEFAULT_TARGET_FILE_SIZE to ``--target-size``
and the service's default worker concurrency (``--worker-concurrency`` sets it and the dispatch slots). Before
the first commit it waits until the service has tracked the table (the listener tracks AO_AUTO_TRACK tables
within seconds) and every actor worker process has logged its warm-up (spark_actors/warmup.py: as a service
that has been up a while is when a stream starts; without the wait, the first action took 8 s). The writer commits through
pyiceberg to the same catalog (SqlCatalog on the same database, warehouse under AO_HOME; a concurrent-update
conflict is retried by pyiceberg). After the last commit the benchmark waits until no action of the table is
queued or running in ``ao_actions`` and none was created for ``--quiet-seconds`` (bounded by
``--drain-timeout``; by default the service's cold-after time plus 20 s, so that every partition's cold
finish is counted), then stops the service (SIGTERM, then SIGKILL) and the Spark server it started.

Baseline run, in the same process after the service has stopped: the same trace (same seed, same rows)
into a second table that nothing tracks. After every ``--compact-every`` commits the writer stops for a
blocking bin-pack: in every partition with at least two live files under 75% of the target, the files
Iceberg's size-ratio rule picks (``plan_iceberg_bin_pack`` with min input files 2: files under 0.75 or
over 1.8 targets, packed First Fit Decreasing into groups of at most a target; ``--baseline-rule all``:
every file of such a partition) are read with pyarrow and written as target-size Parquet files with the
table's field ids, all committed in one REPLACE snapshot (``commit_replace``).

Figures, for each run, from the table's own metadata and (service) ``ao_actions``:

- live data files after each writer commit: the data files of the snapshot the writer just committed,
  counted exactly from its manifests (cached by manifest path); mean and max over the writer's commits,
  and the mean by the partition's lag behind the newest one the writer has written (0 to 4 or more hours;
  days for a daily member).
  The snapshot summary's ``total-data-files`` is compared with that count (a mismatch is reported);
- maintenance commits: snapshots carrying ``autooptimize.action-id`` (baseline: ``benchmark.baseline-
  rewrite``), "during ingest" when their sequence number is below the writer's last commit's, else "after";
- files replaced and bytes rewritten: Σ ``deleted-data-files`` and Σ ``added-files-size`` of the
  maintenance snapshots (bytes rewritten = bytes the maintenance commits wrote into the table; the inputs'
  bytes, Σ ``removed-files-size``, are printed beside). Output written by actions that never committed is
  not counted; unreferenced data files left on disk are reported separately;
- write amplification = bytes rewritten / bytes written by the writer (how many times, on average, each
  byte the writer committed was written again by maintenance; one merge of everything after ingest is 1.0),
  with bytes written by the writer = Σ ``added-files-size`` of the writer's snapshots;
- aborted / failed actions: ``ao_actions`` rows in state ``aborted`` or ``failed``, or whose reason
  mentions a conflict; every state is counted;
- commit → action-submitted latency: for each action the listener created (trigger ``event``), its
  ``created_at`` minus the commit time (snapshot ``timestamp-ms``) of the latest writer snapshot that
  touched its partition and was committed before ``created_at``; p50 / p95 / max. Beside it the same for
  actions on live partitions (rule ``tiered``), and for every action less the settle wait when its rule
  is not ``tiered`` (a settled partition is judged ``AO_SETTLE_SECONDS`` after its last write on purpose;
  that wait is policy, not detection). Beside it, how long
  actions waited (``started_at − created_at``) and ran (``finished_at − started_at``);
- content: the final table read back with a pyiceberg scan and folded into the same digest as the rows
  the writer sent (rows, Σ id, Σ and xor of blake2b-64 of (id, ts, payload)); ids must also be unique.

On this trace every file the writer commits is far under 75% of the target, so bringing the data to
target-size files rewrites about every byte at least once: a write amplification near 1 is the floor of
any policy that ends with healthy partitions.

Goals printed beside the figures (not asserted): service mean live files ≤ the baseline's, write
amplification ≤ 1.5, no aborted or failed action, content equal. The exit code is 0 when both tables'
content equals what was written, 1 otherwise. The benchmark always stops the service and drops its
database, even when interrupted (``--keep-home`` keeps the database and AO_HOME for a look afterwards).

``--service-env AO_NAME=VALUE`` sets one of the service's settings for its run; ``--track NAME[=VALUE]`` sets
the service table's own tuning, an option of ``autooptimize track`` applied once the service tracks the table
and before the writer starts (AutoAnalyze's suggestion for a table: ``--track merge-fan-in=12 --track
leave-alone-below=1MiB``). Both are repeatable.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from autooptimize.config import Settings, load_settings
from autooptimize.domain.goals import WRITE_AMPLIFICATION_GOAL
from autooptimize.domain.policy import DEFAULT_SETTLE_SECONDS, LIVE_MERGE_RULES
from autooptimize.domain.sizes import MiB, parse_size
from autooptimize.iceberg.catalog import default_catalog_properties
from benchmarks.streaming_predict import environment, ratio, report_lines, simulate_this_run
from benchmarks.trace import (
    STREAMING_SEED,
    Commit,
    Digest,
    TraceShape,
    commit_row_parts,
    family_trace,
    hand_over_rows,
    make_trace,
    parse_part_label,
)

REPO = Path(__file__).resolve().parents[1]
ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
# the built-in catalog (no pyiceberg configuration needed); its own database and AO_HOME keep the run apart
CATALOG = "autooptimize"
SERVICE_TABLE = "stream.events"
BASELINE_TABLE = "stream_base.events"
ACTION_ID = "autooptimize.action-id"
ACTION_KIND = "autooptimize.action-kind"
WRITER_PROP = "benchmark.writer-commit"
BASELINE_PROP = "benchmark.baseline-rewrite"

log = logging.getLogger("benchmarks.streaming")

#: the service's settle wait (the benchmark runs it with its default): settled partitions are judged again
#: this long after their last write on purpose, so it is not detection latency
SETTLE_SECONDS = DEFAULT_SETTLE_SECONDS
#: live files are also counted by the partition's lag behind the writer's newest partition (hours, or days for a
#: daily member): 0, 1, …, LAGS_SHOWN-1 or more
LAGS_SHOWN = 5


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --- counting live files -------------------------------------------------------------------------------


class LiveCounter:
    """Exact live data / delete files of a snapshot; manifests are immutable, so each is read once."""

    def __init__(self) -> None:
        self._cache: dict[str, Counter[int]] = {}  # manifest → its live entries by partition value
        self.by_part: Counter[int] = Counter()  # the data files of the snapshot counted last, by partition

    def count(self, table: Table, snapshot: Snapshot) -> tuple[int, int]:
        data = deletes = 0
        self.by_part = Counter()
        for manifest in snapshot.manifests(table.io):
            parts = self._cache.get(manifest.manifest_path)
            if parts is None:
                parts = Counter(e.data_file.partition[0]
                                for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
                self._cache[manifest.manifest_path] = parts
            if manifest.content == ManifestContent.DATA:
                data += parts.total()
                self.by_part.update(parts)
            else:
                deletes += parts.total()
        return data, deletes


def live_files(table: Table, snapshot: Snapshot | None = None) -> list[DataFile]:
    snapshot = snapshot or table.current_snapshot()
    if snapshot is None:
        return []
    out: list[DataFile] = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content == ManifestContent.DATA:
            out += [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    return out


def local_path(uri: str) -> str:
    """``file:///x``, ``file:/x`` and ``/x`` are the same local file."""
    return "/" + uri.removeprefix("file://").removeprefix("file:").lstrip("/")


def unreferenced_data_files(table: Table) -> tuple[int, int]:
    """Data files on disk under the table's data/ that no snapshot in the metadata references."""
    referenced: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                referenced.add(os.path.normpath(local_path(str(entry.data_file.file_path))))
    root = Path(local_path(table.location())) / "data"
    count = size = 0
    for path in root.rglob("*.parquet") if root.exists() else ():
        if os.path.normpath(str(path)) not in referenced:
            count += 1
            size += path.stat().st_size
    return count, size


# --- the writer ------------------------------------------------------------------------------------------


class _RetryCount(logging.Handler):
    """Counts pyiceberg's "Commit failed due to a concurrent update, retrying" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "concurrent update" in record.getMessage():
            self.count += 1


@dataclass
class CommitRecord:
    index: int
    snapshot_id: int
    sequence_number: int
    committed_ms: int
    parts: tuple[int, ...]  # the partition values written (hours, or days for a daily member)
    files_added: int
    bytes_added: int
    rows: int
    live_files: int
    live_delete_files: int
    summary_live_files: int | None
    #: live data files by the partition's lag behind the newest one the writer has written (LAGS_SHOWN-1: that or more)
    live_by_lag: tuple[int, ...]
    seconds: float
    retries: int
    failures: int


def _find_writer_snapshot(table: Table, index: int) -> Snapshot:
    snapshot = table.current_snapshot()
    if snapshot is not None and snapshot.summary is not None and snapshot.summary.get(WRITER_PROP) == str(index):
        return snapshot
    for snapshot in reversed(table.metadata.snapshots):
        if snapshot.summary is not None and snapshot.summary.get(WRITER_PROP) == str(index):
            return snapshot
    raise RuntimeError(f"writer commit {index} is not in the table's history")


def append_in_parts(catalog: Catalog, ident: str, table: Table, shape: TraceShape, commit: Commit,
                    expected: Digest | None, part_rows: int | None = None) -> tuple[Table, int]:
    """Append one commit as one snapshot, as pyiceberg's ``append`` would (a fast append, its files cut by
    the same bin-packing), with the writer's index in the summary. A commit of up to 8 M rows is made and
    written whole, a larger one ``part_rows`` (4 M: :func:`benchmarks.trace.hand_over_rows`) at a time
    (:func:`benchmarks.trace.row_parts`), so that a burst of gigabytes fits in memory: pyiceberg's own
    ``append`` takes a commit whole, and for a partitioned table streams nothing. The files are written
    once; a commit that fails is tried again with the same files, up to five times. Returns the table and
    the failed tries."""
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    files: list[DataFile] = []
    for part in commit_row_parts(shape, commit, part_rows or hand_over_rows(commit.rows)):
        if expected is not None:
            expected.update(part)
        files.extend(_dataframe_to_data_files(table_metadata=table.metadata, df=part, io=table.io,
                                              write_uuid=write_uuid, counter=counter))
        del part  # free this part before the next is made
    failures = 0
    while True:
        try:
            table.refresh()
            with table.transaction() as tx:
                with tx.update_snapshot(snapshot_properties={WRITER_PROP: str(commit.index)}).fast_append() as add:
                    for data_file in files:
                        add.append_data_file(data_file)
            return table, failures
        except CommitFailedException:
            failures += 1
            if failures >= 5:
                raise
            table = catalog.load_table(ident)


def write_trace(catalog: Catalog, ident: str, shape: TraceShape, trace: Sequence[Commit], rate: float,
                expected: Digest | None, after_commit: Callable[[int, Table], None] | None = None,
                alive: Callable[[], str | None] | None = None, label: str = "") -> tuple[list[CommitRecord], float]:
    """Append every commit of ``trace`` at ``rate`` commits/s; returns the records and the seconds taken."""
    table = catalog.load_table(ident)
    counter = LiveCounter()
    retries = _RetryCount()
    pyiceberg_log = logging.getLogger("pyiceberg.table")
    pyiceberg_log.addHandler(retries)
    propagate, pyiceberg_log.propagate = pyiceberg_log.propagate, False
    records: list[CommitRecord] = []
    newest: int | None = None
    started = time.monotonic()
    try:
        for k, commit in enumerate(trace):
            wait = started + k / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            before, failures = retries.count, 0
            t0 = time.monotonic()
            table, failures = append_in_parts(catalog, ident, table, shape, commit, expected)
            seconds = time.monotonic() - t0
            snapshot = _find_writer_snapshot(table, commit.index)
            summary = snapshot.summary
            assert summary is not None
            data_files, delete_files = counter.count(table, snapshot)
            newest = max(commit.parts) if newest is None else max(newest, *commit.parts)
            lags = [0] * LAGS_SHOWN
            for part, n in counter.by_part.items():
                lags[min(LAGS_SHOWN - 1, max(0, newest - part))] += n
            total = summary.get("total-data-files")
            records.append(CommitRecord(
                index=commit.index, snapshot_id=snapshot.snapshot_id,
                sequence_number=snapshot.sequence_number or 0, committed_ms=snapshot.timestamp_ms,
                parts=commit.parts, files_added=int(summary.get("added-data-files") or 0),
                bytes_added=int(summary.get("added-files-size") or 0), rows=commit.rows,
                live_files=data_files, live_delete_files=delete_files, live_by_lag=tuple(lags),
                summary_live_files=int(total) if total is not None else None, seconds=seconds,
                retries=retries.count - before, failures=failures,
            ))
            if after_commit is not None:
                after_commit(k, table)
            if (k + 1) % 20 == 0 or k + 1 == len(trace):
                elapsed = time.monotonic() - started
                state = alive() if alive is not None else None
                say(f"{label}: {k + 1}/{len(trace)} commits in {elapsed:.0f} s ({(k + 1) / elapsed:.2f}/s), "
                    f"live files now {data_files}{'; ' + state if state else ''}")
    finally:
        pyiceberg_log.removeHandler(retries)
        pyiceberg_log.propagate = propagate
    return records, time.monotonic() - started


# --- figures common to both runs -------------------------------------------------------------------------


@dataclass
class RunFigures:
    name: str
    commits: int = 0
    writer_seconds: float = 0.0
    commits_per_second: float = 0.0
    append_p50_s: float | None = None
    append_p95_s: float | None = None
    writer_retries: int = 0
    writer_failures: int = 0
    live_files_mean: float | None = None
    live_files_max: int | None = None
    #: mean live data files after a writer commit by the partition's lag behind the writer's newest one (last: ≥)
    live_files_by_lag: list[float] = field(default_factory=list)
    live_files_end: int | None = None
    end_excess_mse_mib2: float | None = None  # Σ over partitions of (SSE − SSE of the best layout) / files
    live_delete_files_max: int = 0
    summary_count_mismatches: int = 0
    maintenance_commits_during: int = 0
    maintenance_commits_after: int = 0
    maintenance_kinds: dict[str, int] = field(default_factory=dict)
    files_replaced: int = 0
    files_written: int = 0
    bytes_replaced: int = 0
    bytes_rewritten: int = 0
    writer_bytes: int = 0
    write_amplification: float | None = None
    unreferenced_files: int = 0
    unreferenced_bytes: int = 0
    rows_expected: int = 0
    rows_read: int = 0
    ids_unique: bool = False
    content_equal: bool = False
    digest_expected: dict[str, object] = field(default_factory=dict)
    digest_read: dict[str, object] = field(default_factory=dict)
    # service only
    actions_by_state: dict[str, int] = field(default_factory=dict)
    actions_by_kind: dict[str, int] = field(default_factory=dict)
    #: per policy rule (``explain``'s names): partitions merged and their planned input bytes (MB)
    rewritten_by_rule: dict[str, list[float]] = field(default_factory=dict)
    aborted_or_failed: int | None = None
    failures: list[str] = field(default_factory=list)
    latency_actions: int = 0
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_max_s: float | None = None
    latency_unmatched: int = 0
    #: the same, for actions on a live partition (rule ``tiered``) and for the others with the deliberate
    #: settle wait (AO_SETTLE_SECONDS after the partition's last write) taken off
    live_latency_p50_s: float | None = None
    live_latency_p95_s: float | None = None
    net_latency_p50_s: float | None = None
    net_latency_p95_s: float | None = None
    queued_p50_s: float | None = None
    queued_p95_s: float | None = None
    run_p50_s: float | None = None
    run_p95_s: float | None = None
    #: started → finished of the actions on a live partition (rule ``tiered`` only), and the p50 of each
    #: phase the succeeded actions timed (plan, rewrite, commit, the Spark job's parts, …)
    live_run_p50_s: float | None = None
    live_run_p95_s: float | None = None
    phases_p50_s: dict[str, float] = field(default_factory=dict)
    action_bytes_in: int | None = None
    action_bytes_out: int | None = None
    audit_events: dict[str, int] = field(default_factory=dict)
    log_findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # baseline only
    compactions: int = 0
    compaction_seconds: float = 0.0


def end_excess_mse(files: Sequence[DataFile], target: int) -> float:
    """What the policy simulator reports at the end (``domain.entropy.end_layout``), in MiB²: Σ over partitions of
    max(0, SSE − SSE_best) over all files (SSE_best: the best layout of the partition's bytes capped at the target)."""
    from autooptimize.domain.entropy import end_layout

    parts: dict[Any, list[int]] = {}
    for df in files:
        parts.setdefault((df.spec_id, tuple(df.partition)), []).append(int(df.file_size_in_bytes))
    return round(end_layout(parts.values(), target)[1] / MiB ** 2, 1)


def read_back(table: Table) -> tuple[Digest, bool]:
    """The digest of every row the table holds, and whether its ids are unique, read one record batch at a
    time: a member of gigabytes (m03, m04, m11) read whole, then digested, needs several times its size in
    memory, and m03's first 24 commits (6 GB) were killed for it.

    One file is scanned at a time: pyiceberg's batch reader reads every file of the scan at once, in its
    thread pool, and holds each whole until its turn, so m03 in full (23 GB) took the benchmark past 24 GB."""
    read = Digest()
    ids: list[np.ndarray] = []
    scan = table.scan()
    for task in scan.plan_files():
        one = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive)
        for batch in one.to_record_batches([task]):
            read.update(pa.Table.from_batches([batch]))
            ids.append(batch.column("id").to_numpy(zero_copy_only=False))
    every = np.sort(np.concatenate(ids)) if ids else np.empty(0, dtype=np.int64)
    unique = bool(every.size == 0 or (np.diff(every) != 0).all())
    return read, unique


def table_figures(fig: RunFigures, table: Table, records: list[CommitRecord], seconds: float,
                  maintenance_prop: str, expected: Digest, target: int | None = None) -> None:
    """Fill the figures every run has from the final table, the writer's records and the expected digest."""
    table.refresh()
    fig.commits = len(records)
    fig.writer_seconds = round(seconds, 1)
    fig.commits_per_second = round(len(records) / seconds, 3) if seconds > 0 else 0.0
    appends = [r.seconds for r in records]
    fig.append_p50_s = round(pct(appends, 0.5) or 0.0, 3)
    fig.append_p95_s = round(pct(appends, 0.95) or 0.0, 3)
    fig.writer_retries = sum(r.retries for r in records)
    fig.writer_failures = sum(r.failures for r in records)
    lives = [r.live_files for r in records]
    fig.live_files_mean = round(statistics.mean(lives), 2) if lives else None
    fig.live_files_max = max(lives, default=None)
    if records:
        fig.live_files_by_lag = [round(statistics.mean(r.live_by_lag[k] for r in records), 2)
                                 for k in range(LAGS_SHOWN)]
    fig.live_delete_files_max = max((r.live_delete_files for r in records), default=0)
    fig.summary_count_mismatches = sum(1 for r in records if r.summary_live_files not in (None, r.live_files))
    current = table.current_snapshot()
    final = live_files(table, current) if current is not None else []
    fig.live_files_end = len(final)
    if target is not None:
        fig.end_excess_mse_mib2 = end_excess_mse(final, target)
    if current is not None and current.summary is not None:
        total = current.summary.get("total-data-files")
        if total is not None and int(total) != fig.live_files_end:
            fig.notes.append(f"final snapshot summary says total-data-files={total}, manifests hold "
                             f"{fig.live_files_end}")
    last_seq = max((r.sequence_number for r in records), default=0)
    writer_ids = {r.snapshot_id for r in records}
    kinds: Counter[str] = Counter()
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None:
            continue
        if snapshot.snapshot_id in writer_ids:
            fig.writer_bytes += int(summary.get("added-files-size") or 0)
            continue
        if summary.get(maintenance_prop) is None:
            if summary.get(WRITER_PROP) is None:
                fig.notes.append(f"snapshot {snapshot.snapshot_id} ({summary.operation.value}) is neither the "
                                 "writer's nor marked as maintenance")
            continue
        if (snapshot.sequence_number or 0) < last_seq:
            fig.maintenance_commits_during += 1
        else:
            fig.maintenance_commits_after += 1
        kinds[summary.get(ACTION_KIND) or summary.operation.value] += 1
        fig.files_replaced += int(summary.get("deleted-data-files") or 0)
        fig.files_written += int(summary.get("added-data-files") or 0)
        fig.bytes_replaced += int(summary.get("removed-files-size") or 0)
        fig.bytes_rewritten += int(summary.get("added-files-size") or 0)
    fig.maintenance_kinds = dict(kinds)
    if fig.writer_bytes:
        fig.write_amplification = round(fig.bytes_rewritten / fig.writer_bytes, 3)
    fig.unreferenced_files, fig.unreferenced_bytes = unreferenced_data_files(table)
    # content: everything written, read back through pyiceberg
    read, fig.ids_unique = read_back(table)
    fig.rows_expected = expected.rows
    fig.rows_read = read.rows
    fig.digest_expected = expected.as_dict()
    fig.digest_read = read.as_dict()
    fig.content_equal = read.key() == expected.key() and fig.ids_unique


# --- the service run -------------------------------------------------------------------------------------


def drain_quiet_seconds(settings: Settings, args: argparse.Namespace) -> float:
    """``--quiet-seconds``, else the cold-after time plus 20 s: a shorter wait stops the service before its
    cold finishes, which leaves write amplification low and the end layout unfinished. The cold-after time
    is the table's own (``--track cold-after=N``) before the service's (``--service-env
    AO_COLD_AFTER_SECONDS=N``) before the default."""
    if args.quiet_seconds is not None:
        return float(args.quiet_seconds)
    tracked = [item.partition("=")[2] for item in args.track or () if item.partition("=")[0] == "cold-after"]
    for name, value in (("--track cold-after", tracked[-1] if tracked else None),
                        ("--service-env AO_COLD_AFTER_SECONDS", service_overrides(args).get("AO_COLD_AFTER_SECONDS"))):
        if value is None:
            continue
        try:
            return float(value) + 20.0
        except ValueError:
            raise SystemExit(f"{name} wants seconds, got {value!r}") from None
    return settings.cold_after_seconds + 20.0


def service_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--service-env AO_NAME=value`` items as a dict (experiments: AO_SETTLE_SECONDS=15, …)."""
    out: dict[str, str] = {}
    for item in args.service_env or ():
        key, _, value = item.partition("=")
        if not key.startswith("AO_") or not value:
            raise SystemExit(f"--service-env wants AO_NAME=value, got {item!r}")
        out[key] = value
    return out


def track_options(args: argparse.Namespace) -> list[str]:
    """``--track NAME=VALUE`` (or ``--track NAME`` for a flag) items as ``autooptimize track`` arguments."""
    out: list[str] = []
    for item in args.track or ():
        name, sep, value = item.partition("=")
        if not re.fullmatch(r"[a-z][a-z-]*", name) or (sep and not value):
            raise SystemExit(f"--track wants an option of `autooptimize track` as NAME=VALUE or NAME "
                             f"(merge-fan-in=12, quiet-merge), got {item!r}")
        out += [f"--{name}", value] if sep else [f"--{name}"]
    return out


def apply_track_options(service: Service, args: argparse.Namespace) -> None:
    """The table's own tuning (``--track``), set with ``autooptimize track`` once the service tracks it and
    before the writer starts; a refused option stops the run."""
    options = track_options(args)
    if not options:
        return
    done = subprocess.run([sys.executable, "-m", "autooptimize.cli", "track", SERVICE_TABLE, *options], cwd=REPO,
                          env=service.env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"--track: `autooptimize track {SERVICE_TABLE} {' '.join(options)}` refused: "
                         f"{(done.stderr or done.stdout).strip()[-400:]}")
    say(f"service: {SERVICE_TABLE} tracked with {' '.join(options)}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(settings: Settings, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AO_", "PYICEBERG_", "SPARK_REMOTE"))}
    env.update({
        "AO_HOME": str(settings.home),
        "AO_DATABASE_URL": settings.database_url,
        "AO_REDIS_URL": settings.redis_url,
        "AO_CATALOG": settings.catalog,
        "AO_AUTO_TRACK": SERVICE_TABLE,
        "AO_DEFAULT_TARGET_FILE_SIZE": str(settings.default_target_file_size),
        **({"AO_WORKER_CONCURRENCY": str(args.worker_concurrency), "AO_DISPATCH_SLOTS": str(args.worker_concurrency)}
           if args.worker_concurrency else {}),
        "AO_SPARK_PORT": str(_free_port()),
        "AO_CONSOLE_PORT": str(_free_port()),  # another service on this host may hold the default 8765
        "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(service_overrides(args))
    return env


def _proc_start(pid: int) -> str | None:
    """The start time field of /proc/<pid>/stat (None when the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def child_processes(pid: int) -> list[tuple[int, str]]:
    """Direct children of ``pid`` as (pid, start time), to kill by id if their parent cannot stop them."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append((int(entry.name), fields[19]))
    return out


def stops_with_us(argv: list[str]) -> list[str]:
    """``argv``, run so that the kernel sends it SIGTERM when this process dies, even by SIGKILL: the kernel
    killed the benchmark's writer at 22 GB on m03's 5.7 GB burst commit, and `autooptimize up` and its Spark
    Connect server ran on (2026-11-30). Through util-linux's ``setpriv --pdeathsig`` where it is installed,
    else ``argv`` as it is. The signal comes when the thread that started it ends: start it from the main
    thread."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", *argv] if setpriv else list(argv)


class Service:
    """``autooptimize up`` as a subprocess with its own environment; ``stop`` always cleans up."""

    def __init__(self, settings: Settings, args: argparse.Namespace) -> None:
        self.settings = settings
        self.log_path = settings.home / "up.log"
        self.env = service_env(settings, args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.exited_at: float | None = None

    def start(self) -> None:
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen(stops_with_us([sys.executable, "-m", "autooptimize.cli", "up", "--no-flower"]),
                                     cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()

    def state(self) -> str | None:
        """None while running, else what happened."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is None:
            return None
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        return f"service exited with {code}"

    def stop(self) -> list[str]:
        notes: list[str] = []
        if self.proc is not None:
            children = child_processes(self.proc.pid)
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=100)
                except subprocess.TimeoutExpired:
                    notes.append("`autooptimize up` did not stop within 100 s of SIGTERM; killed")
                    self.proc.kill()
                    self.proc.wait()
            for pid, started in children:  # each child leads its own session: kill its group by id
                if _proc_start(pid) == started:
                    notes.append(f"child {pid} of `up` outlived it; killed its process group")
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
        from spark_actors import server

        if server.stop_local_server(self.settings):
            notes.append("the Spark Connect server outlived `up`; stopped it")
        return notes

    def log_findings(self) -> list[str]:
        """What the service's logs say went wrong: the listener's "not submitted" reasons, errors per log."""
        found: list[str] = []
        logs = sorted((self.settings.home / "logs").glob("*.log"))
        for path in logs:
            content = path.read_text(errors="replace").splitlines()
            not_submitted = Counter(
                re.sub(r"'[^']*'", "'…'", m.group(1))
                for m in (re.search(r"not submitted \((.*)\)\s*$", line) for line in content) if m)
            for reason, n in not_submitted.most_common(3):
                found.append(f"{path.name}: {n}× partition not submitted ({reason})")
            errors = [line for line in content if re.search(r"\b(ERROR|CRITICAL)\b|Traceback", line)]
            if errors:
                found.append(f"{path.name}: {len(errors)} error line(s), first: {errors[0].strip()[:240]}")
        return found

    def log_tail(self, lines: int = 30) -> str:
        chunks = []
        for path in [self.log_path, *sorted((self.settings.home / "logs").glob("*.log"))]:
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- {path.name} ---\n" + "\n".join(tail))
        return "\n".join(chunks)


def wait_tracked(engine: Engine, service: Service, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if service.state() is not None:
            return None
        with contextlib.suppress(Exception):  # the service has not created its tables yet
            with engine.connect() as conn:
                found = conn.execute(text("SELECT 1 FROM ao_tracked_tables WHERE identifier = :t"),
                                     {"t": SERVICE_TABLE}).first()
            if found:
                return time.monotonic() - started
        time.sleep(1.0)
    return None


WARM_LINE = "actor warm: Spark session open"  # logged by spark_actors/warmup.py


def wait_warm(service: Service, timeout: float) -> float | None:
    """Seconds until every actor worker process of the service has logged its warm-up (as a service that
    has been up a while is, when a stream starts); None when it did not within ``timeout`` or warms up
    nothing (``AO_ACTOR_WARM_UP`` off, the ``local`` engine)."""
    with environment(service.env):
        settings = load_settings()
    if not settings.actor_warm_up or settings.rewrite_engine == "local":
        return None
    started = time.monotonic()
    while time.monotonic() - started < timeout and service.state() is None:
        logs = (service.settings.home / "logs").glob("worker-*.log")
        if sum(path.read_text(errors="replace").count(WARM_LINE) for path in logs) >= settings.worker_concurrency:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def active_actions(engine: Engine) -> tuple[int, int]:
    """(actions queued or running, actions in all) of the service's table."""
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT count(*) FILTER (WHERE a.state IN ('queued', 'running')), count(*) "
            "FROM ao_actions a JOIN ao_tracked_tables t ON t.id = a.table_id WHERE t.identifier = :t"),
            {"t": SERVICE_TABLE}).one()
    return int(row[0]), int(row[1])


def wait_quiet(engine: Engine, service: Service, quiet: float, timeout: float) -> tuple[bool, float]:
    """Wait until nothing is queued or running and no action appeared for ``quiet`` seconds."""
    started = time.monotonic()
    quiet_since: float | None = None
    last_total = -1
    last_said = started
    while True:
        now = time.monotonic()
        active, total = active_actions(engine)
        if active or total != last_total:
            quiet_since = None if active else now
        elif quiet_since is None:
            quiet_since = now
        last_total = total
        if quiet_since is not None and now - quiet_since >= quiet:
            return True, now - started
        if service.state() is not None or now - started >= timeout:
            return False, now - started
        if now - last_said >= 30:
            say(f"service: waiting for quiet, {active} action(s) queued or running, {total} in all")
            last_said = now
        time.sleep(1.0)


def action_part(key: Any, values: Any) -> int | None:
    """The partition value (hours, or days, since the epoch) an action's partition stands for, from whichever
    form it is in."""
    candidates: list[Any] = list(values.values()) if isinstance(values, dict) else []
    if key:
        with contextlib.suppress(ValueError, TypeError):
            decoded = json.loads(key)
            candidates += decoded if isinstance(decoded, list) else [decoded]
        candidates += re.findall(r"\d{4}-\d{2}-\d{2}(?:-\d{2})?", str(key))
        candidates += re.findall(r"=(-?\d+)(?:$|/)", str(key))
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return parse_part_label(value)
            with contextlib.suppress(ValueError):
                return int(value)
    return None


#: The policy rules that merge a partition while it is written to (tiered, priced, filled).
LIVE_RULES = frozenset(LIVE_MERGE_RULES)


def _rules(action: dict[str, Any]) -> set[str]:
    """The policy rules an action's plan applied to its partitions (``tiered``: a live partition)."""
    return {str(p.get("rule")) for p in (action.get("plan") or {}).get("partitions") or []}


def action_figures(fig: RunFigures, engine: Engine, records: list[CommitRecord]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text(
            "SELECT a.*, extract(epoch FROM a.created_at) AS created_epoch, "
            "extract(epoch FROM a.started_at - a.created_at) AS queued_s, "
            "extract(epoch FROM a.finished_at - a.started_at) AS run_s "
            "FROM ao_actions a JOIN ao_tracked_tables t ON t.id = a.table_id WHERE t.identifier = :t "
            "ORDER BY a.created_at"), {"t": SERVICE_TABLE})]
    fig.actions_by_state = dict(Counter(str(r.get("state")) for r in rows))
    if not rows:
        fig.notes.append("the service created no action: its column is the writer alone")
    fig.actions_by_kind = dict(Counter(str(r.get("kind")) for r in rows))
    bad = [r for r in rows if r.get("state") in ("aborted", "failed") or "conflict" in str(r.get("reason") or "").lower()]
    fig.aborted_or_failed = len(bad)
    reasons = Counter(f"{r.get('state')}: {r.get('reason') or '-'}: {str(r.get('error') or '').strip()[:300]}"
                      for r in bad)
    fig.failures = [f"{n}× {what}" for what, n in reasons.most_common(6)]
    done = [r for r in rows if r.get("state") == "succeeded"]
    fig.action_bytes_in = sum(int(r.get("bytes_in") or 0) for r in done)
    fig.action_bytes_out = sum(int(r.get("bytes_out") or 0) for r in done)
    for r in done:
        for part in (r.get("plan") or {}).get("partitions") or []:
            entry = fig.rewritten_by_rule.setdefault(str(part.get("rule")), [0, 0.0])
            entry[0] += 1
            entry[1] = round(entry[1] + int(part.get("bytes_rewritten") or 0) / 1e6, 1)
    latencies: list[float] = []
    live_latencies: list[float] = []
    net_latencies: list[float] = []
    for r in rows:
        if r.get("trigger") != "event":
            continue
        part = action_part(r.get("partition_key"), r.get("partition_values"))
        created = float(r["created_epoch"])
        touching = [c.committed_ms / 1000 for c in records if part in c.parts and c.committed_ms / 1000 < created]
        if part is None or not touching:
            fig.latency_unmatched += 1
            continue
        latencies.append(created - max(touching))
        rules = _rules(r)
        if rules and rules <= LIVE_RULES:
            live_latencies.append(latencies[-1])
        net_latencies.append(latencies[-1] - (0.0 if rules and rules <= LIVE_RULES else SETTLE_SECONDS))
    with engine.connect() as conn:
        fig.audit_events = {f"{event}{':' + reason if reason else ''}": int(n) for event, reason, n in conn.execute(text(
            "SELECT a.event, a.detail->>'reason', count(*) FROM ao_audit_log a "
            "JOIN ao_tracked_tables t ON t.id = a.table_id WHERE t.identifier = :t GROUP BY 1, 2 ORDER BY 3 DESC"),
            {"t": SERVICE_TABLE})}
    queued = [float(r["queued_s"]) for r in rows if r.get("queued_s") is not None]
    ran = [float(r["run_s"]) for r in rows if r.get("run_s") is not None]
    fig.queued_p50_s, fig.queued_p95_s = (None, None) if not queued else (
        round(pct(queued, 0.5) or 0.0, 1), round(pct(queued, 0.95) or 0.0, 1))
    fig.run_p50_s, fig.run_p95_s = (None, None) if not ran else (
        round(pct(ran, 0.5) or 0.0, 1), round(pct(ran, 0.95) or 0.0, 1))
    live_ran = [float(r["run_s"]) for r in done if r.get("run_s") is not None and _rules(r) and _rules(r) <= LIVE_RULES]
    fig.live_run_p50_s, fig.live_run_p95_s = (None, None) if not live_ran else (
        round(pct(live_ran, 0.5) or 0.0, 2), round(pct(live_ran, 0.95) or 0.0, 2))
    phases: dict[str, list[float]] = {}
    for r in done:
        for phase, seconds in (r.get("timings") or {}).items():
            if isinstance(seconds, int | float):
                phases.setdefault(str(phase), []).append(float(seconds))
    fig.phases_p50_s = {k: round(pct(v, 0.5) or 0.0, 3) for k, v in sorted(phases.items())}
    fig.latency_actions = len(latencies)
    fig.latency_p50_s = None if not latencies else round(pct(latencies, 0.5) or 0.0, 2)
    fig.latency_p95_s = None if not latencies else round(pct(latencies, 0.95) or 0.0, 2)
    fig.latency_max_s = None if not latencies else round(max(latencies), 2)
    for name, values in (("live_latency", live_latencies), ("net_latency", net_latencies)):
        setattr(fig, f"{name}_p50_s", None if not values else round(pct(values, 0.5) or 0.0, 2))
        setattr(fig, f"{name}_p95_s", None if not values else round(pct(values, 0.95) or 0.0, 2))
    return rows


def create_table(catalog: Catalog, ident: str, grain: str = "hour") -> Table:
    """The trace's table, partitioned by ``hour(ts)`` or (``grain`` "day") ``day(ts)``."""
    from benchmarks.trace import GRAINS, SCHEMA

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(ident.split(".")[0])
    return catalog.create_table(ident, schema=SCHEMA, partition_spec=GRAINS[grain][0])


def run_service(args: argparse.Namespace, settings: Settings, engine: Engine, catalog: Catalog, shape: TraceShape,
                trace: list[Commit], expected: Digest) -> tuple[RunFigures, dict[str, Any]]:
    fig = RunFigures("service")
    extra: dict[str, Any] = {}
    create_table(catalog, SERVICE_TABLE, args.grain)
    service = Service(settings, args)
    say(f"service: starting `autooptimize up --no-flower` (logs in {settings.home / 'logs'})")
    service.start()
    records: list[CommitRecord] = []
    seconds = 0.0
    try:
        tracked_after = wait_tracked(engine, service, args.start_timeout)
        extra["tracked_after_s"] = None if tracked_after is None else round(tracked_after, 1)
        if tracked_after is None:
            fig.notes.append(f"the service had not tracked {SERVICE_TABLE} within {args.start_timeout:.0f} s "
                             f"({service.state() or 'still running'}); the writer started anyway")
            say(f"service: NOT tracking the table ({service.state() or 'timeout'}); writing anyway")
        else:
            say(f"service: tracking {SERVICE_TABLE} {tracked_after:.0f} s after start")
        apply_track_options(service, args)
        warm_after = wait_warm(service, args.start_timeout)
        extra["warm_after_s"] = None if warm_after is None else round(warm_after, 1)
        say(f"service: actor processes {'warm' if warm_after is not None else 'NOT warm'} "
            f"{0 if warm_after is None else warm_after:.0f} s later; writer starts")
        records, seconds = write_trace(catalog, SERVICE_TABLE, shape, trace, args.rate, expected,
                                       alive=lambda: _service_line(engine, service), label="service")
        quiet, waited = wait_quiet(engine, service, drain_quiet_seconds(settings, args), args.drain_timeout)
        extra["drain_seconds"] = round(waited, 1)
        extra["quiet"] = quiet
        if not quiet:
            why = service.state() or f"not quiet within {args.drain_timeout:.0f} s"
            fig.notes.append(f"after the last commit: {why}")
        say(f"service: {'quiet' if quiet else 'NOT quiet'} {waited:.0f} s after the last commit; stopping it")
    finally:
        state = service.state()
        if state is not None:
            fig.notes.append(f"{state} during the run")
            extra["service_log_tail"] = service.log_tail()
        fig.notes += service.stop()
        with contextlib.suppress(OSError):
            fig.log_findings = service.log_findings()
    table = catalog.load_table(SERVICE_TABLE)
    table_figures(fig, table, records, seconds, ACTION_ID, expected, args.target_size)
    action_figures(fig, engine, records)
    return fig, extra


def _service_line(engine: Engine, service: Service) -> str:
    state = service.state()
    if state:
        return state
    with contextlib.suppress(Exception):
        active, total = active_actions(engine)
        return f"actions: {total} created, {active} queued or running"
    return ""


# --- the baseline run ------------------------------------------------------------------------------------


def baseline_compact(table: Table, target: int, rule: str, run_no: int) -> tuple[int, int, float]:
    """One blocking bin-pack of every partition with ≥ 2 files under 75% of the target; returns
    (files replaced, files written, seconds)."""
    from autooptimize.arrow.writers import dictionary_columns
    from autooptimize.domain.planning import PlanFile, plan_iceberg_bin_pack
    from autooptimize.iceberg.commit import commit_replace, data_file_from_footer
    from autooptimize.iceberg.files import partition_path

    started = time.monotonic()
    table.refresh()
    by_partition: dict[tuple[int, Any], list[DataFile]] = {}
    for f in live_files(table):
        by_partition.setdefault((f.spec_id, f.partition[0]), []).append(f)
    arrow = schema_to_pyarrow(table.schema())
    removed: list[DataFile] = []
    added: list[DataFile] = []
    written: list[str] = []
    for (spec_id, _), files in sorted(by_partition.items(), key=lambda kv: kv[0][1]):
        if sum(1 for f in files if f.file_size_in_bytes < 0.75 * target) < 2:
            continue
        if rule == "all":
            groups = [(files, max(1, math.ceil(sum(f.file_size_in_bytes for f in files) / target)))]
        else:
            by_path = {str(f.file_path): f for f in files}
            plan = plan_iceberg_bin_pack([PlanFile(str(f.file_path), f.file_size_in_bytes, f.record_count)
                                          for f in files], target, min_input_files=2)
            groups = [([by_path[p.path] for p in g.files], g.files_out) for g in plan.groups]
        # Iceberg's own partition path (ts_hour=2026-03-02-05, ts_day=2026-03-02)
        directory = f"{table.location()}/data/{partition_path(table.specs()[spec_id], table.schema(), files[0].partition)}"
        os.makedirs(local_path(directory), exist_ok=True)
        for inputs, outputs in groups:
            data = pa.concat_tables([pq.read_table(local_path(str(f.file_path))).select(arrow.names).cast(arrow)
                                     for f in inputs])
            step = math.ceil(data.num_rows / outputs)
            for k in range(outputs):
                part = data.slice(k * step, step)
                if part.num_rows == 0:
                    continue
                path = f"{directory}/baseline-{run_no:04d}-{uuid.uuid4().hex}.parquet"
                # the service's own choice of dictionaries (near-unique columns plain), so both write alike
                pq.write_table(part, local_path(path), compression="zstd", use_dictionary=dictionary_columns(part))
                written.append(path)
                added.append(data_file_from_footer(table, path, spec_id, inputs[0].partition))
            removed += inputs
    if removed:
        try:
            commit_replace(table, removed, added, {BASELINE_PROP: str(run_no)})
        except Exception:
            for path in written:
                with contextlib.suppress(OSError):
                    os.unlink(local_path(path))
            raise
    return len(removed), len(added), time.monotonic() - started


def run_baseline(args: argparse.Namespace, catalog: Catalog, shape: TraceShape, trace: list[Commit],
                 expected: Digest) -> RunFigures:
    fig = RunFigures("baseline")
    create_table(catalog, BASELINE_TABLE, args.grain)
    failures: list[str] = []

    def compact(k: int, table: Table) -> None:
        if (k + 1) % args.compact_every:
            return
        try:
            replaced, _, seconds = baseline_compact(table, args.target_size, args.baseline_rule, fig.compactions + 1)
        except Exception as exc:  # measured, not hidden
            failures.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        fig.compactions += 1
        fig.compaction_seconds += seconds

    records, seconds = write_trace(catalog, BASELINE_TABLE, shape, trace, args.rate, None, after_commit=compact,
                                   label="baseline")
    table = catalog.load_table(BASELINE_TABLE)
    table_figures(fig, table, records, seconds, BASELINE_PROP, expected, args.target_size)
    fig.aborted_or_failed = len(failures)
    fig.failures = failures[:6]
    fig.compaction_seconds = round(fig.compaction_seconds, 1)
    return fig


# --- report ----------------------------------------------------------------------------------------------


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def _v(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def report(result: dict[str, Any]) -> str:
    s: dict[str, Any] = result["service"]
    b: dict[str, Any] = result.get("baseline") or {}
    t = result["trace"]
    lines = [
        f"trace: {t['commits']} commits at {t['rate']}/s, seed {t['seed']}; {t['files']} files (one per touched "
        f"partition), {t['rows']:,} rows, {t['drawn_mb']:.1f} MB drawn; {t['partitions']} {t.get('grain', 'hour')} partitions, one "
        f"simulated hour per {t['commits_per_hour']} commits, late data up to 3 h back; drawn file sizes p50 "
        f"{t['size_p50_kb']:.0f} KB, p95 {t['size_p95_kb']:.0f} KB, max {t['size_max_kb']:.0f} KB",
        f"target file size {result['target_size'] / MiB:g} MiB for both (service: AO_DEFAULT_TARGET_FILE_SIZE="
        f"{result['target_size']}); baseline: blocking bin-pack every {result['compact_every']} commits, rule "
        f"{result['baseline_rule']!r}",
        "",
        f"{'':42}{'service':>18}{'baseline':>18}   goal",
    ]

    def row(label: str, key: str, fmt: Callable[[Any], str] = _v, goal: str = "") -> None:
        lines.append(f"{label:42}{fmt(s.get(key)):>18}{(fmt(b.get(key)) if b else '-'):>18}   {goal}".rstrip())

    def pair(d: dict[str, Any], k1: str, k2: str, fmt: Callable[[Any], str] = _v) -> str:
        return f"{fmt(d.get(k1))} / {fmt(d.get(k2))}" if d else "-"

    def both(label: str, k1: str, k2: str, fmt: Callable[[Any], str] = _v, goal: str = "") -> None:
        lines.append(f"{label:42}{pair(s, k1, k2, fmt):>18}{pair(b, k1, k2, fmt):>18}   {goal}".rstrip())

    row("writer commits/s (achieved)", "commits_per_second")
    both("writer append p50 / p95 s", "append_p50_s", "append_p95_s")
    row("writer commit retries (conflicts)", "writer_retries")
    row("live data files after a commit: mean", "live_files_mean", goal="service ≤ baseline")
    row("live data files after a commit: max", "live_files_max")
    lags = [" ".join(f"{x:.1f}" for x in d.get("live_files_by_lag") or ()) or "-" for d in (s, b) if d]
    unit = "d" if t.get("grain") == "day" else "h"
    label = f"  by the partition's lag, 0 … {LAGS_SHOWN - 1}+ {unit} behind"
    lines.append(f"{label:36}" + "".join(f"{x:>21}" for x in lags))
    row("live data files at the end", "live_files_end")
    row("excess MSE at the end (MiB²)", "end_excess_mse_mib2")
    both("maintenance commits during / after", "maintenance_commits_during", "maintenance_commits_after")
    both("files replaced / written", "files_replaced", "files_written")
    row("bytes written by the writer", "writer_bytes", _mb)
    row("bytes rewritten (maintenance outputs)", "bytes_rewritten", _mb)
    row("bytes of the replaced inputs", "bytes_replaced", _mb)
    row("write amplification", "write_amplification", goal="≤ 1.5")
    row("aborted / failed actions", "aborted_or_failed", goal="0")
    both("commit → action submitted p50 / p95 s", "latency_p50_s", "latency_p95_s")
    both("  partitions written to p50 / p95 s", "live_latency_p50_s", "live_latency_p95_s")
    both("  all, less the settle wait p50 / p95 s", "net_latency_p50_s", "net_latency_p95_s", goal="p95 < 2")
    both("action created → started p50 / p95 s", "queued_p50_s", "queued_p95_s")
    both("action started → finished p50 / p95 s", "run_p50_s", "run_p95_s")
    both("  partitions written to p50 / p95 s", "live_run_p50_s", "live_run_p95_s", goal="p50 ≤ 1")
    row("unreferenced data files left on disk", "unreferenced_files")
    both("rows read / written", "rows_read", "rows_expected", lambda v: "-" if v is None else f"{v:,}")
    row("content equal (rows, ids, checksum)", "content_equal", lambda v: "-" if v is None else "yes" if v else "NO",
        goal="yes")
    lines.append("")
    unmatched = f", {s['latency_unmatched']} without a matching writer commit" if s["latency_unmatched"] else ""
    lines.append("service partitions merged and input MB by policy rule: "
                 + (", ".join(f"{rule} {n}× {mb} MB" for rule, (n, mb) in sorted(s["rewritten_by_rule"].items()))
                    or "-"))
    lines.append("service action phases p50 s: " + (", ".join(f"{k} {v}" for k, v in s["phases_p50_s"].items()) or "-"))
    lines.append(f"service actions by state: {s['actions_by_state'] or '{}'}; by kind: {s['actions_by_kind'] or '{}'}; "
                 f"latency over {s['latency_actions']} event action(s){unmatched}")
    if s.get("maintenance_kinds"):
        lines.append(f"service maintenance snapshots by kind: {s['maintenance_kinds']}; succeeded actions' bytes "
                     f"in / out per ao_actions: {_mb(s.get('action_bytes_in'))} / {_mb(s.get('action_bytes_out'))}")
    ex = result.get("service_run", {})
    lines.append(f"service: tracked the table {_v(ex.get('tracked_after_s'))} s after start, actors warm "
                 f"{_v(ex.get('warm_after_s'))} s later; after the last commit "
                 f"{'quiet' if ex.get('quiet') else 'NOT quiet'} after {_v(ex.get('drain_seconds'))} s")
    if result.get("simulated"):
        lines += report_lines(result["simulated"], b or None)
    if s.get("audit_events"):
        lines.append(f"service audit log for the table: {s['audit_events']}")
    for what in s.get("failures") or []:
        lines.append(f"  service failure: {what}")
    for what in s.get("log_findings") or []:
        lines.append(f"  service log: {what}")
    for note in s.get("notes") or []:
        lines.append(f"  service note: {note}")
    if b:
        lines.append(f"baseline: {b['compactions']} blocking compactions, {b['compaction_seconds']} s in all")
        for what in b.get("failures") or []:
            lines.append(f"  baseline failure: {what}")
        for note in b.get("notes") or []:
            lines.append(f"  baseline note: {note}")
    r = result["ratios"]
    lines.append("")
    lines.append(f"ratios service/baseline: mean live files {_v(r['live_files_mean'])}, "
                 f"write amplification {_v(r['write_amplification'])}")
    g = result["goals"]
    lines.append("goals: " + "; ".join(f"{name}: {'met' if ok else 'MISSED' if ok is not None else 'n/a'}"
                                       for name, ok in g.items()))
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------------------


def trace_summary(shape: TraceShape, trace: list[Commit], rate: float, grain: str = "hour") -> dict[str, Any]:
    sizes = [f.drawn_bytes for c in trace for f in c.files]
    return {
        "commits": len(trace), "rate": rate, "seed": shape.seed, "commits_per_hour": shape.commits_per_hour,
        "grain": grain,
        "files": len(sizes), "rows": sum(c.rows for c in trace), "drawn_mb": sum(sizes) / 1e6,
        "partitions": len({p for c in trace for p in c.parts}),
        "size_p50_kb": (pct(sizes, 0.5) or 0) / 1e3, "size_p95_kb": (pct(sizes, 0.95) or 0) / 1e3,
        "size_max_kb": max(sizes) / 1e3,
    }


def drop_database(name: str) -> None:
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def flush_redis(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = int(client.dbsize())
        client.flushdb()
        return keys
    finally:
        client.close()


def free_table(catalog: Catalog, ident: str, home: Path) -> int:
    """Drop ``ident`` and delete every file under its location, which must lie in the benchmark's own
    ``home``; returns the bytes deleted."""
    location = Path(catalog.load_table(ident).location().removeprefix("file://")).resolve()
    if not location.is_relative_to(home.resolve()):
        raise RuntimeError(f"{ident} lies at {location}, outside the benchmark's {home}: not deleting it")
    size = sum(p.stat().st_size for p in location.rglob("*") if p.is_file())
    catalog.drop_table(ident)
    shutil.rmtree(location)
    return size


#: What a run's table holds on disk against the bytes its writer wrote: the writer's files, and the merges'
#: outputs beside the files they replaced until those expire (m03 in full: 42 GB kept for 23.3 GB drawn).
DISK_PER_BYTE_WRITTEN = 2.0


def disk_needed(drawn_bytes: float, *, baseline: bool, free_disk: bool) -> int:
    """The bytes a run needs free where its home is made: one table's worth (:data:`DISK_PER_BYTE_WRITTEN`
    × what the trace writes, and a tenth more), two with the baseline unless ``free_disk`` deletes the
    service's table before the baseline writes."""
    tables = 2 if baseline and not free_disk else 1
    return int(tables * DISK_PER_BYTE_WRITTEN * drawn_bytes * 1.1)


def check_disk(drawn_bytes: float, args: argparse.Namespace, where: str) -> None:
    """Refuse to start a run whose trace writes ``drawn_bytes`` that the disk under ``where`` cannot hold
    (before anything is created): on 2026-12-01 a second m03 run beside a kept one filled the disk, and its
    merges failed."""
    need = disk_needed(drawn_bytes, baseline=not args.no_baseline, free_disk=args.free_disk)
    free = shutil.disk_usage(where).free
    if free < need:
        raise SystemExit(f"this run needs about {need / 1e9:.1f} GB free under {where}, and {free / 1e9:.1f} GB "
                         "are: remove kept runs (/tmp/ao-bench-stream-*), or use --free-disk, --no-baseline "
                         "or --commits N")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    shape = TraceShape(commits=args.commits, seed=args.seed, commits_per_hour=args.commits_per_hour)
    trace = family_trace(args.family_member, args.seed, args.commits) if args.family_member else make_trace(shape)
    summary = trace_summary(shape, trace, args.rate, args.grain)
    check_disk(summary["drawn_mb"] * 1e6, args, tempfile.gettempdir())
    home = Path(tempfile.mkdtemp(prefix="ao-bench-stream-"))
    db_name = f"ao_bench_stream_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=f"postgresql+psycopg2://postgres@127.0.0.1:5432/{db_name}",
                        redis_url=args.redis_url, home=home, catalog=CATALOG,
                        default_target_file_size=args.target_size, auto_track=SERVICE_TABLE)
    engine: Engine | None = None
    catalog: Catalog | None = None
    result: dict[str, Any] = {"trace": summary, "target_size": args.target_size,
                              "member": args.family_member.name if args.family_member else None,
                              "compact_every": args.compact_every, "baseline_rule": args.baseline_rule}
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db_name}"')
    admin.dispose()
    say(f"database {db_name}, AO_HOME {home}, Redis {args.redis_url}")
    try:
        stale = flush_redis(args.redis_url)
        if stale:
            say(f"the Redis db held {stale} key(s) from an earlier run; flushed")
        engine = create_engine(settings.database_url, pool_pre_ping=True)
        catalog = load_catalog(CATALOG, **default_catalog_properties(settings))
        expected = Digest()
        service, extra = run_service(args, settings, engine, catalog, shape, trace, expected)
        result["service"] = asdict(service)
        result["service_run"] = {k: v for k, v in extra.items() if k != "service_log_tail"}
        if "service_log_tail" in extra:
            print(extra["service_log_tail"], file=sys.stderr)
        try:  # the simulator on this run's own writes: what it does not model shows as the gap
            result["simulated"] = simulate_this_run(service_env(settings, args), catalog, SERVICE_TABLE,
                                                    args.compact_every, asdict(service))
        except Exception as exc:  # a diagnostic: the run's own figures stand without it
            result["simulated"] = None
            result["simulated_error"] = f"{type(exc).__name__}: {exc}"
            say(f"the simulator on this run's writes failed: {result['simulated_error']}")
        baseline = None
        if args.free_disk:
            say(f"service: its table's files deleted ({free_table(catalog, SERVICE_TABLE, home) / 1e9:.1f} GB), "
                "so that the baseline's fit on the disk")
        if not args.no_baseline:
            say("baseline: the same trace into a table nothing tracks, blocking bin-pack every "
                f"{args.compact_every} commits")
            baseline = run_baseline(args, catalog, shape, trace, expected)
            result["baseline"] = asdict(baseline)
        result["ratios"] = {
            "live_files_mean": ratio(service.live_files_mean, baseline.live_files_mean if baseline else None),
            "write_amplification": ratio(service.write_amplification,
                                          baseline.write_amplification if baseline else None),
        }
        result["goals"] = {
            "mean live files ≤ baseline": None if baseline is None or service.live_files_mean is None
            or baseline.live_files_mean is None else service.live_files_mean <= baseline.live_files_mean,
            "write amplification ≤ 1.5": None if service.write_amplification is None
            else service.write_amplification <= WRITE_AMPLIFICATION_GOAL,
            "zero aborted actions": service.aborted_or_failed == 0,
            "content equal": service.content_equal and (baseline is None or baseline.content_equal),
        }
        result["ok"] = service.content_equal and (baseline is None or baseline.content_equal)
        return result
    finally:
        if catalog is not None:
            with contextlib.suppress(Exception):
                catalog.engine.dispose()  # type: ignore[attr-defined]
        if engine is not None:
            engine.dispose()
        with contextlib.suppress(Exception):
            flush_redis(args.redis_url)
        if args.keep_home:  # the service's records too: its actions and decisions, for a look afterwards
            say(f"kept {home} and database {db_name} (drop it with: dropdb -h 127.0.0.1 -U postgres {db_name})")
        else:
            drop_database(db_name)
            shutil.rmtree(home, ignore_errors=True)
        say(f"cleaned up: Redis db flushed{'' if args.keep_home else f', database {db_name} dropped'}")


def parse_args(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks.streaming",
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The benchmark's arguments, checked (``extra`` adds a caller's own, e.g. benchmarks.streaming_repeat)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    if extra is not None:
        extra(parser)
    parser.add_argument("--commits", type=int, default=300, help="writer commits (default 300)")
    parser.add_argument("--rate", type=float, default=1.6, help="writer commits per second (default 1.6)")
    parser.add_argument("--seed", type=int, default=STREAMING_SEED)
    parser.add_argument("--commits-per-hour", type=int, default=60, help="commits per simulated hour (default 60)")
    parser.add_argument("--target-size", default="8MiB", help="target file size of both runs (default 8MiB)")
    parser.add_argument("--compact-every", type=int, default=20, help="baseline: commits between bin-packs")
    parser.add_argument("--baseline-rule", choices=("iceberg", "all"), default="iceberg",
                        help="baseline: rewrite the files Iceberg's rule picks (default) or every file of a "
                             "partition with ≥ 2 small files")
    parser.add_argument("--quiet-seconds", type=float, default=None,
                        help="service: quiet this long = done (default: its cold-after time + 20 s)")
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="service: most seconds to wait for quiet")
    parser.add_argument("--start-timeout", type=float, default=600.0,
                        help="service: most seconds to wait for it to track the table")
    parser.add_argument("--worker-concurrency", type=int, default=None,
                        help="actor worker processes (default: the service's own default, AO_WORKER_CONCURRENCY)")
    parser.add_argument("--redis-url", default="redis://localhost:6379/11", help="a Redis db of the benchmark's own")
    parser.add_argument("--no-baseline", action="store_true", help="only the service run")
    parser.add_argument("--service-env", action="append", metavar="AO_NAME=VALUE",
                        help="a setting for the service run (repeatable), e.g. AO_SETTLE_SECONDS=15")
    parser.add_argument("--track", action="append", metavar="NAME[=VALUE]",
                        help="the service table's own tuning, an option of `autooptimize track` set once the service "
                             "tracks it (repeatable), e.g. merge-fan-in=12, leave-alone-below=1MiB, quiet-merge")
    parser.add_argument("--free-disk", action="store_true",
                        help="delete the service table's files once its figures are taken, so that both runs of a "
                             "member of tens of GB fit on the disk (m03 in full: about 46 GB a run)")
    parser.add_argument("--keep-home", action="store_true",
                        help="keep the temporary AO_HOME (logs, warehouse) and the run's database")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    parser.add_argument("--member", help="replay a member of benchmarks.trace_family instead (its rate and target; "
                                         "a daily member into a day(ts) table; --commits keeps its first commits "
                                         "only)")
    parser.add_argument("--variant", type=int, default=0,
                        help="with --member: its commits drawn from another seed (benchmarks.trace_family.variant; "
                             "0: the member itself)")
    args = parser.parse_args(argv)
    track_options(args)  # a malformed --track is refused before anything runs
    args.family_member = None
    args.grain = "hour"
    if args.member:
        from benchmarks.trace_family import HOUR_SECONDS, member, variant

        try:
            args.family_member = variant(member(args.member), args.variant)
        except ValueError as e:
            parser.error(f"--member/--variant: {e}")
        args.rate = args.family_member.rate
        args.grain = args.family_member.grain
        args.target_size = str(args.family_member.target)
        args.commits_per_hour = max(1, round(HOUR_SECONDS * args.rate))
        if "--commits" not in (argv if argv is not None else sys.argv):
            args.commits = args.family_member.commits
    if args.commits < 1 or args.rate <= 0 or args.commits_per_hour < 1 or args.compact_every < 1:
        parser.error("--commits, --commits-per-hour and --compact-every must be ≥ 1 and --rate > 0")
    args.target_size = parse_size(args.target_size, "--target-size")
    return args


def on_sigterm_unwind() -> None:
    """SIGTERM unwinds through the clean-up: the service stops, the database goes."""
    def terminated(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    on_sigterm_unwind()
    result = measure(args)
    print(report(result))
    if args.json:
        print(json.dumps(result, default=str, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
