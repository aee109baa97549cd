"""Large partitions: group cap, bounded concurrent group writes, partial progress (real tables, Spark)."""

from __future__ import annotations

import datetime as dt
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from autooptimize.domain.actions import Hooks
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_PART_PROPERTY,
    ACTION_PARTS_PROPERTY,
    find_action_snapshot,
)
from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action
from tests.integration.tables import (
    DAY1,
    action_outputs,
    batch,
    identifier,
    live_files,
    make_table,
    second_reader_checksum,
)

pytestmark = pytest.mark.spark
DAYS = [DAY1 + dt.timedelta(days=i) for i in range(4)]


class Crash(BaseException):
    """Stands for the worker dying at a chosen point (not an Exception: nothing may catch it)."""


def _four_partitions(catalog):
    """4 partitions of 3 small files: a whole-table merge plans 4 groups (one per partition)."""
    return make_table(catalog, {day: 3 for day in DAYS}, name="large")


def _submit(settings, table, partition=None, **kw):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return actions.submit(settings, ident, partition=partition, dispatch=False, **kw)


def _action_snapshots(table, action_id):
    table.refresh()
    return [s for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _removed_and_added(table, snapshot):
    """Data file paths a snapshot removed and added (from its manifests' entries)."""
    removed, added = set(), set()
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id:
                continue
            path = str(entry.data_file.file_path)
            (removed if entry.status.name == "DELETED" else added if entry.status.name == "ADDED" else set()).add(path)
    return removed, added


def _no_stray_outputs(table):
    live = {p.removeprefix("file://") for p in live_files(table)}
    return action_outputs(table) <= live


def test_concurrent_groups_commit_one_snapshot_with_every_row(settings, spark, catalog):
    table = _four_partitions(catalog)
    checksum, second = table_checksum(table), second_reader_checksum(table)
    inputs = set(live_files(table))
    # two groups must be in their after_write at the same time: with one job in flight this times out
    both_in_flight = threading.Barrier(2, timeout=45)
    threads: set[str] = set()

    def meet(_paths):
        threads.add(threading.current_thread().name)
        both_in_flight.wait()

    # groups in flight at once is the local and spark_sql engines' concurrency (the default engine's
    # groups are the tasks of one Spark job)
    action_id = _submit(settings, table, options={"engine": "local"})
    assert settings.rewrite_concurrency == 2
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=meet))

    assert out["state"] == "succeeded", out
    assert len(out["plan"]["partitions"]) == 4
    assert (out["files_in"], out["files_out"]) == (12, 4)
    assert out["rows_in"] == out["rows_out"] == 600 and out["checksum_in"] == out["checksum_out"]
    assert len(threads) == 2
    assert len(_action_snapshots(table, action_id)) == 1
    assert table_checksum(table) == checksum
    assert second_reader_checksum(table) == second
    assert not inputs & set(live_files(table))
    assert _no_stray_outputs(table)


def test_partial_progress_commits_parts_that_all_carry_the_action_id(settings, spark, catalog):
    table = _four_partitions(catalog)
    checksum, second = table_checksum(table), second_reader_checksum(table)
    inputs = set(live_files(table))

    action_id = _submit(settings, table, options={"partial_progress": "true", "max_commits": 2})
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    snapshots = _action_snapshots(table, action_id)
    assert len(snapshots) == 2
    assert [s.summary[ACTION_PART_PROPERTY] for s in snapshots] == ["1", "2"]
    assert ACTION_PARTS_PROPERTY not in snapshots[0].summary.additional_properties
    assert snapshots[1].summary[ACTION_PARTS_PROPERTY] == "2"
    assert all(s.summary.operation.value == "replace" for s in snapshots)
    assert find_action_snapshot(table, action_id).snapshot_id == snapshots[1].snapshot_id == out["snapshot_id"]
    # each part replaces whole groups: two partitions' inputs and their outputs, nothing shared
    removed = [_removed_and_added(table, s)[0] for s in snapshots]
    assert [len(r) for r in removed] == [6, 6] and not removed[0] & removed[1]
    assert removed[0] | removed[1] == inputs
    assert {p.split("/day=")[1][:10] for p in removed[0]} & {p.split("/day=")[1][:10] for p in removed[1]} == set()
    assert (out["files_in"], out["files_out"], out["rows_in"], out["rows_out"]) == (12, 4, 600, 600)
    assert out["checksum_in"] == out["checksum_out"]
    assert table_checksum(table) == checksum
    assert second_reader_checksum(table) == second
    assert _no_stray_outputs(table)
    # running it again records it, commits nothing
    again = actions.execute(settings, action_id, spark=spark)
    assert again["state"] == "succeeded" and len(_action_snapshots(table, action_id)) == 2


def _crash_on_commit(hook_point: str, nth: int) -> tuple[Hooks, list[int]]:
    calls: list[int] = []

    def crash(*_args) -> None:
        calls.append(1)
        if len(calls) == nth:
            raise Crash()

    return Hooks(**{hook_point: crash}), calls


@pytest.mark.parametrize(("hook_point", "rewritten_on_retry"), [
    ("after_commit", 3),  # part 1 committed, the rest rewritten
    ("before_commit", 2),  # part 1 committed, part 2 checkpointed: committed on retry without rewriting
])
def test_crash_during_partial_progress_retry_commits_only_the_rest(settings, spark, catalog, hook_point,
                                                                   rewritten_on_retry):
    table = _four_partitions(catalog)
    checksum, second = table_checksum(table), second_reader_checksum(table)
    inputs = set(live_files(table))
    action_id = _submit(settings, table, options={"partial_progress": True, "max_commits": 4})

    hooks, _ = _crash_on_commit(hook_point, 1 if hook_point == "after_commit" else 2)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=hooks)
    assert actions.get_outcome(settings, action_id)["state"] == "running"
    first = _action_snapshots(table, action_id)
    assert len(first) == 1 and first[0].summary[ACTION_PART_PROPERTY] == "1"
    assert find_action_snapshot(table, action_id) is None, "one part of four is not the whole action"
    part1_outputs = _removed_and_added(table, first[0])[1]

    rewrites: list[list[str]] = []
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=rewrites.append))

    assert out["state"] == "succeeded", out
    assert len(rewrites) == rewritten_on_retry
    snapshots = _action_snapshots(table, action_id)
    assert sorted(int(s.summary[ACTION_PART_PROPERTY]) for s in snapshots) == [1, 2, 3, 4]
    assert snapshots[-1].summary[ACTION_PARTS_PROPERTY] == "4"
    # exactly once per group: every input removed by exactly one part, part 1's output still live
    removed = [_removed_and_added(table, s)[0] for s in snapshots]
    assert sum(len(r) for r in removed) == len(inputs) == 12
    assert set().union(*removed) == inputs
    assert part1_outputs <= set(live_files(table))
    assert (out["files_in"], out["rows_in"], out["rows_out"]) == (12, 600, 600)
    assert out["snapshot_id"] == snapshots[-1].snapshot_id
    assert table_checksum(table) == checksum
    assert second_reader_checksum(table) == second
    assert _no_stray_outputs(table)


def test_verification_failure_in_one_concurrent_group_commits_nothing_and_leaves_no_output(settings, spark,
                                                                                          catalog):
    table = _four_partitions(catalog)
    snapshot, checksum = table.current_snapshot().snapshot_id, table_checksum(table)
    tampered: list[str] = []
    lock = threading.Lock()

    def tamper(paths: list[str]) -> None:
        with lock:
            if tampered:
                return
            tampered.append(paths[0])
        path = paths[0].removeprefix("file://")
        data = pq.read_table(path)
        values = data.column("v").to_pylist()
        values[0] = "tampered"
        index = data.schema.get_field_index("v")
        pq.write_table(data.set_column(index, data.schema.field(index), pa.array(values, data.schema.field(index).type)), path)

    out = actions.execute(settings, _submit(settings, table), spark=spark, hooks=Hooks(after_write=tamper))

    assert out["state"] == "failed" and out["reason"] == "verification_failed", out
    assert "checksum" in out["error"]
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert table_checksum(table) == checksum
    assert not action_outputs(table), "every group's output must be removed, the good ones' too"


@pytest.mark.parametrize(("kind", "options", "named"), [
    ("merge", {"partial_progress": "maybe"}, "partial_progress"),
    ("merge", {"max_commits": 0}, "max_commits"),
    ("merge", {"max_commits": "ten"}, "max_commits"),
    ("sort", {"partial_progress": "maybe", "sort_order": "id"}, "partial_progress"),
    ("merge", {"max_commit": 3}, "max_commits"),  # a typo: the message lists the valid options
])
def test_bad_progress_options_are_refused_before_anything_is_written(settings, catalog, kind, options, named):
    table = make_table(catalog, {DAY1: 2})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    with session_scope(settings) as s:
        before = s.scalar(select(func.count()).select_from(Action))
    with pytest.raises(InvalidArgument, match=named):
        actions.submit(settings, ident, partition="day=2026-01-01", kind=kind, dispatch=False, options=options)
    with session_scope(settings) as s:
        assert s.scalar(select(func.count()).select_from(Action)) == before
    assert len(table.refresh().metadata.snapshots) == 2


def test_no_group_reads_more_than_the_cap(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 8}, rows=200)
    sizes = [r["file_size_in_bytes"] for r in table.inspect.files().select(["file_size_in_bytes"]).to_pylist()]
    cap = int(max(sizes) * 2.5)  # two files per group at most
    capped = settings.model_copy(update={"max_group_bytes": cap})
    checksum, second = table_checksum(table), second_reader_checksum(table)

    action_id = _submit(capped, table, partition="day=2026-01-01")
    out = actions.execute(capped, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    groups = out["plan"]["partitions"][0]["groups"]
    assert len(groups) == 4
    assert all(g["bytes_in"] <= cap for g in groups)
    assert out["files_in"] == 8 and out["files_out"] == 4
    assert len(_action_snapshots(table, action_id)) == 1
    assert table_checksum(table) == checksum
    assert second_reader_checksum(table) == second


def test_a_full_sort_over_the_cap_splits_only_along_disjoint_ranges(settings, spark, catalog):
    table = make_table(catalog, {}, name="sortcap")
    # two clusters of overlapping id ranges, [0, 400) and [1000, 1400), two interleaved files each
    for first in (0, 1, 1000, 1001):
        rows = batch(0, 200, DAY1)
        ids = pa.array([first + 2 * i for i in range(200)], pa.int64())
        table.append(rows.set_column(0, rows.schema.field(0), ids))
    sizes = [r["file_size_in_bytes"] for r in table.inspect.files().select(["file_size_in_bytes"]).to_pylist()]
    capped = settings.model_copy(update={"max_group_bytes": int(max(sizes) * 2.5)})
    checksum = table_checksum(table)

    action_id = _submit(capped, table, partition="day=2026-01-01", kind="sort", options={"sort_order": "id"})
    out = actions.execute(capped, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    groups = out["plan"]["partitions"][0]["groups"]
    assert len(groups) == 2
    assert table_checksum(table) == checksum
    spans = sorted((min(t["id"].to_pylist()), max(t["id"].to_pylist()))
                   for t in (pq.read_table(p.removeprefix("file://")) for p in live_files(table)))
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
