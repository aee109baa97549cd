"""Delete compaction against real v2 tables with real position and equality delete files, PostgreSQL and a
Spark Connect server.

Every test checks rows and a content checksum against two readers: pyiceberg's own scan (it applies
position deletes; 0.12 raises on equality deletes, so for those the reference before the compaction is
the second reader alone) and the second reader of tests/integration/deletes.py (pyarrow, deletes applied
by plain Python from the live entries).
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

from autooptimize.domain.actions import Hooks
from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.iceberg.deletes import (
    commit_delete_files,
    scope_of,
    write_equality_deletes,
    write_position_deletes,
)
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.snapshots import snapshot_diff
from autooptimize.services import actions, tracking
from tests.integration.deletes import (
    data_files,
    delete_equal,
    delete_files,
    delete_positions,
    reference_checksum,
    reference_read,
)
from tests.integration.tables import (
    DAY1,
    DAY2,
    SCHEMA,
    action_outputs,
    batch,
    files_on_disk,
    identifier,
    make_table,
)

pytestmark = pytest.mark.spark
KIND = "compact_deletes"


class Crash(BaseException):
    """Stands for the worker dying at a chosen point (not an Exception: nothing may catch it)."""


# the default engine (pyarrow on the executors, one Spark job per action), Spark SQL's own job, and
# pyarrow in the worker (local)
ENGINES = pytest.mark.parametrize("engine", [{}, {"engine": "spark_sql"}, {"engine": "local"}],
                                 ids=["spark", "spark_sql", "local"])


def _submit(settings, table, partition: str | None = "day=2026-01-01", **kw):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return actions.submit(settings, ident, partition=partition, kind=KIND, dispatch=False, **kw)


def _snapshots_with(table, action_id):
    table.refresh()
    return [s for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _ids(table) -> set[int]:
    table.refresh()
    return set(table.scan().to_arrow()["id"].to_pylist())


def _assert_clean(table, out) -> None:
    """The committed snapshot is ours, the listener can diff it, and no stray output stayed behind."""
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == out["snapshot_id"]
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary[ACTION_ID_PROPERTY] == out["id"]
    diff = snapshot_diff(table, snapshot)  # raises HistoryGap if summary and manifests disagree
    assert diff.removed_files == out["files_in"] and diff.added_files == out["files_out"]
    on_disk = files_on_disk(table)
    assert not [f for f in on_disk if f.endswith(".crc") or "/_" in f or "/." in f]
    live = {p.removeprefix("file://") for p in data_files(table)}
    stray = {f for f in action_outputs(table) if f.endswith(".parquet")} - live
    assert not stray, stray


def test_position_deletes_are_folded_into_the_data_and_their_files_dropped(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 2})
    day1 = data_files(table, "day=2026-01-01")
    day2 = data_files(table, "day=2026-01-02")
    own = delete_positions(table, {day1[0]: [0, 7, 49], day1[1]: [1, 2]})
    other = delete_positions(table, {day2[0]: [5]})
    expected = table_checksum(table)  # pyiceberg applies position deletes
    assert expected == reference_checksum(table)
    assert len(table.scan().to_arrow()) == 250 - 6
    stats = {pf.human: pf.delete_stats for pf in live_partitions(table).values()}
    assert (stats["day=2026-01-01"].files, stats["day=2026-01-01"].rows_deleted_estimate) == (1, 5)
    assert stats["day=2026-01-01"].position_files == 1 and stats["day=2026-01-01"].data_rows == 150

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (2, 1)  # day1[2] has no deletes and is left alone
    assert out["rows_in"] == 100 and out["rows_out"] == 95
    assert out["checksum_in"] == out["checksum_out"]
    assert out["plan"]["rows_deleted"] == 5 and out["plan"]["delete_files_removed"] == [own]
    assert table_checksum(table) == expected
    assert reference_checksum(table) == expected
    assert delete_files(table) == [other]
    files = data_files(table)
    assert day1[2] in files and set(day2) <= set(files) and not {day1[0], day1[1]} & set(files)
    _assert_clean(table, out)
    # merge still refuses day2, and says what to run instead
    merge = actions.submit(settings, identifier(table), partition="day=2026-01-02", dispatch=False)
    refused = actions.execute(settings, merge, spark=spark)
    assert refused["state"] == "refused" and refused["reason"] == "has_delete_files"
    assert "compact_deletes" in refused["error"]


@ENGINES
def test_equality_deletes_apply_only_to_older_data_files(settings, spark, catalog, engine):
    table = make_table(catalog, {DAY1: 2, DAY2: 1})
    day1 = data_files(table, "day=2026-01-01")
    eq = delete_equal(table, day1[0], ["id"], [{"id": 3}, {"id": 60}, {"id": 210}, {"id": 999_999}])
    late = batch(200, 50, DAY1)  # appended after the equality delete: its id 210 must survive
    table.append(late)
    late_file = next(p for p in data_files(table, "day=2026-01-01") if p not in day1)
    pos = delete_positions(table, {late_file: [0]})  # id 200; puts the late file into the rewrite
    with pytest.raises(ValueError, match="equality deletes"):
        table.scan().to_arrow()  # pyiceberg 0.12 cannot read equality deletes: the reference is reader 2
    reference = reference_read(table)
    assert len(reference) == 200 - 3
    expected = arrow_checksum(reference)

    action_id = _submit(settings, table, options=engine)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert out["files_in"] == 3 and out["rows_in"] == 150 and out["rows_out"] == 147
    assert out["checksum_in"] == out["checksum_out"]
    assert sorted(out["plan"]["delete_files_removed"]) == sorted([eq, pos])
    assert delete_files(table) == []
    ids = _ids(table)  # pyiceberg can read the table again
    assert 210 in ids and not {3, 60, 200} & ids
    assert table_checksum(table) == expected
    assert reference_checksum(table) == expected
    _assert_clean(table, out)


@ENGINES
def test_position_and_equality_deletes_together_on_two_columns(settings, spark, catalog, engine):
    table = make_table(catalog, {DAY1: 3, DAY2: 1})
    day1 = data_files(table, "day=2026-01-01")
    delete_positions(table, {day1[1]: [0, 1, 2], day1[2]: [10]})
    # (id, v) must both match: id 20 with the wrong v stays
    delete_equal(table, day1[0], ["id", "v"], [{"id": 5, "v": "value-5"}, {"id": 20, "v": "nope"},
                                               {"id": 120, "v": "value-120"}])
    delete_positions(table, {day1[0]: [5, 6]})  # position 5 (id 5) is deleted twice: counted once
    day2_before = set(data_files(table, "day=2026-01-02"))
    expected = reference_checksum(table)

    action_id = _submit(settings, table, options=engine)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert out["rows_in"] == 150 and out["rows_out"] == 150 - 3 - 1 - 2 - 1
    assert delete_files(table) == []
    ids = _ids(table)
    assert 20 in ids and not {5, 6, 50, 51, 52, 110, 120} & ids
    assert table_checksum(table) == expected
    assert reference_checksum(table) == expected
    assert day2_before <= set(data_files(table))
    _assert_clean(table, out)


@ENGINES
def test_unpartitioned_table(settings, spark, catalog, engine):
    table = catalog.create_table(f"test.unpart_{uuid.uuid4().hex[:8]}", schema=SCHEMA,
                                 partition_spec=UNPARTITIONED_PARTITION_SPEC)
    for first in (0, 40, 80):
        table.append(batch(first, 40, DAY1 if first < 80 else DAY2))
    files = data_files(table)
    delete_positions(table, {files[0]: [0, 39], files[2]: [3]})
    eq = delete_equal(table, files[1], ["id"], [{"id": 41}, {"id": 85}])  # unpartitioned: applies table-wide
    expected = reference_checksum(table)

    action_id = _submit(settings, table, partition=None, options=engine)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert out["files_in"] == 3 and out["rows_out"] == 120 - 3 - 2
    assert eq in out["plan"]["delete_files_removed"] and delete_files(table) == []
    assert table_checksum(table) == expected
    assert reference_checksum(table) == expected
    assert not {0, 39, 83, 41, 85} & _ids(table)
    _assert_clean(table, out)


def test_position_delete_file_naming_files_in_two_partitions_is_refused_unchanged(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 1, DAY2: 1})
    (day1,), (day2,) = data_files(table, "day=2026-01-01"), data_files(table, "day=2026-01-02")
    # A day1 delete file that also names a day2 row. The spec applies a position delete only within its
    # own partition (the second reader keeps row 53); pyiceberg 0.12 applies it anyway. Readers disagree,
    # so the compaction must refuse rather than bake one reading into the data.
    shared = delete_positions(table, {day1: [1, 2], day2: [3]}, scope_path=day1)
    assert 53 not in _ids(table) and 53 in set(reference_read(table)["id"].to_pylist())
    snapshot = table.current_snapshot().snapshot_id
    pyiceberg_view, spec_view = table_checksum(table), reference_checksum(table)

    out = actions.execute(settings, _submit(settings, table), spark=spark)
    assert out["state"] == "refused" and out["reason"] == "position_delete_outside_partition", out
    assert shared in out["error"]
    # day2 holds no delete file of its own: nothing to compact there
    out = actions.execute(settings, _submit(settings, table, partition="day=2026-01-02"), spark=spark)
    assert out["state"] == "skipped" and out["reason"] == "no_delete_files", out

    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert delete_files(table) == [shared] and set(data_files(table)) == {day1, day2}
    assert (table_checksum(table), reference_checksum(table)) == (pyiceberg_view, spec_view)
    assert not action_outputs(table)


def test_position_delete_file_of_another_partition_naming_an_input_is_refused(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 1, DAY2: 1})
    (day1,), (day2,) = data_files(table, "day=2026-01-01"), data_files(table, "day=2026-01-02")
    delete_positions(table, {day1: [0]})
    stray = delete_positions(table, {day2: [1], day1: [5]}, scope_path=day2)  # lives in day2, names day1
    snapshot = table.refresh().current_snapshot().snapshot_id

    out = actions.execute(settings, _submit(settings, table), spark=spark)

    assert out["state"] == "refused" and out["reason"] == "position_delete_outside_partition", out
    assert stray in out["error"]
    assert table.refresh().current_snapshot().snapshot_id == snapshot and not action_outputs(table)


def test_position_deletes_of_two_partitions_committed_together(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2, DAY2: 2})
    day1, day2 = data_files(table, "day=2026-01-01"), data_files(table, "day=2026-01-02")
    # one snapshot adds a delete file to each partition; compacting the whole table folds both
    files = [write_position_deletes(table, scope_of(table, day1[0]), [(day1[0], 0), (day1[1], 9)]),
             write_position_deletes(table, scope_of(table, day2[1]), [(day2[1], 4)])]
    commit_delete_files(table, files)
    expected = table_checksum(table)
    assert expected == reference_checksum(table) and len(table.scan().to_arrow()) == 197

    action_id = _submit(settings, table, partition=None)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"], out["rows_in"], out["rows_out"]) == (3, 2, 150, 147)
    assert delete_files(table) == [] and day2[0] in data_files(table)
    assert table_checksum(table) == expected == reference_checksum(table)
    _assert_clean(table, out)


def test_rerunning_a_finished_action_changes_nothing(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2})
    delete_positions(table, {data_files(table)[0]: [4]})
    expected = table_checksum(table)
    action_id = _submit(settings, table)
    first = actions.execute(settings, action_id, spark=spark)
    snapshot = table.refresh().current_snapshot().snapshot_id
    again = actions.execute(settings, action_id, spark=spark)
    assert first["state"] == again["state"] == "succeeded"
    assert again["snapshot_id"] == snapshot == table.refresh().current_snapshot().snapshot_id
    assert len(_snapshots_with(table, action_id)) == 1
    assert table_checksum(table) == expected == reference_checksum(table)
    # the partition has no delete files any more: a new action has nothing to do
    later = actions.execute(settings, _submit(settings, table), spark=spark)
    assert later["state"] == "skipped" and later["reason"] == "no_delete_files"


def test_append_to_the_partition_during_compaction_is_kept(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2})
    files = data_files(table)
    delete_equal(table, files[0], ["id"], [{"id": 10}, {"id": 1010}])
    delete_positions(table, {files[1]: [0]})
    late = batch(1000, 30, DAY1)  # id 1010 arrives after the equality delete: it must stay
    before = reference_read(table)
    expected = arrow_checksum(pa.concat_tables([before, late.cast(before.schema)]))

    def append_concurrently() -> None:
        catalog.load_table(identifier(table)).append(late)

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(before_commit=append_concurrently))

    assert out["state"] == "succeeded", out
    assert out["rows_out"] == 100 - 2
    assert delete_files(table) == []
    assert table_checksum(table) == expected
    assert reference_checksum(table) == expected
    assert 1010 in _ids(table)
    assert len(_snapshots_with(table, action_id)) == 1
    _assert_clean(table, out)


def test_a_new_delete_file_during_compaction_aborts_and_removes_the_output(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2})
    files = data_files(table)
    delete_positions(table, {files[0]: [1]})
    written: list[str] = []
    after: dict[str, object] = {}

    def delete_concurrently() -> None:
        writer = catalog.load_table(identifier(table))
        delete_positions(writer, {files[0]: [2]})
        after["snapshot"] = writer.refresh().current_snapshot().snapshot_id
        after["checksum"] = table_checksum(writer)

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark,
                          hooks=Hooks(after_write=written.extend, before_commit=delete_concurrently))

    assert out["state"] == "aborted" and out["reason"] == "conflict", out
    assert written and not any(os.path.exists(p.removeprefix("file://")) for p in written)
    assert table.refresh().current_snapshot().snapshot_id == after["snapshot"]
    assert table_checksum(table) == after["checksum"] == reference_checksum(table)
    assert not action_outputs(table)


def test_crash_between_commit_and_bookkeeping_commits_once(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 3})
    files = data_files(table)
    delete_positions(table, {files[0]: [0], files[2]: [9]})
    delete_equal(table, files[1], ["id"], [{"id": 77}])
    expected = reference_checksum(table)

    def crash(_snapshot_id: int) -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_commit=crash))
    assert actions.get_outcome(settings, action_id)["state"] == "running"
    committed = table.refresh().current_snapshot().snapshot_id

    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded" and out["reason"] == "already_committed"
    assert out["snapshot_id"] == committed
    assert out["files_in"] == 3 and out["rows_in"] == 150 and out["rows_out"] == 147
    assert table.refresh().current_snapshot().snapshot_id == committed
    assert len(_snapshots_with(table, action_id)) == 1
    assert table_checksum(table) == expected == reference_checksum(table)


def test_crash_before_commit_resumes_from_checkpoint_without_rewriting(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2})
    files = data_files(table)
    delete_positions(table, {files[0]: [3, 4]})
    expected = table_checksum(table)

    def crash() -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(before_commit=crash))
    rewrites: list[list[str]] = []
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=rewrites.append))

    assert out["state"] == "succeeded" and out["reason"] == "resumed_from_checkpoint", out
    assert rewrites == [], "a checkpointed output must be committed without rewriting"
    assert len(_snapshots_with(table, action_id)) == 1
    assert delete_files(table) == []
    assert table_checksum(table) == expected == reference_checksum(table)


def test_every_row_deleted_removes_the_file_without_output(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2}, rows=10)
    files = data_files(table)
    delete_positions(table, {files[0]: range(10)})
    expected = table_checksum(table)
    assert expected == reference_checksum(table)

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"], out["rows_out"]) == (1, 0, 0)
    assert data_files(table) == [files[1]] and delete_files(table) == []
    assert table_checksum(table) == expected == reference_checksum(table)


@ENGINES
def test_equality_delete_on_null_matches_null_rows(settings, spark, catalog, engine):
    table = make_table(catalog, {DAY1: 1}, rows=20)
    with_nulls = batch(100, 10, DAY1)
    with_nulls = with_nulls.set_column(2, "v", pa.array([None if i % 2 else f"value-{100 + i}" for i in range(10)]))
    table.append(with_nulls)
    first = data_files(table)[0]
    delete_equal(table, first, ["v"], [{"v": None}, {"v": "value-3"}])  # Iceberg: a null matches nulls
    reference = reference_read(table)
    assert len(reference) == 30 - 5 - 1
    expected = arrow_checksum(reference)

    out = actions.execute(settings, _submit(settings, table, options=engine), spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["rows_in"], out["rows_out"]) == (30, 24)
    assert delete_files(table) == []
    assert None not in set(table.scan().to_arrow()["v"].to_pylist())
    assert table_checksum(table) == expected == reference_checksum(table)
    _assert_clean(table, out)


def test_an_output_that_lost_a_row_is_never_committed(settings, spark, catalog):
    import pyarrow.parquet as pq

    table = make_table(catalog, {DAY1: 2})
    delete_positions(table, {data_files(table)[0]: [0]})
    snapshot = table.refresh().current_snapshot().snapshot_id
    expected = table_checksum(table)

    def drop_a_row(paths: list[str]) -> None:
        path = paths[0].removeprefix("file://")
        data = pq.read_table(path)
        pq.write_table(data.slice(1), path)

    out = actions.execute(settings, _submit(settings, table), spark=spark, hooks=Hooks(after_write=drop_a_row))

    assert out["state"] == "failed" and out["reason"] == "verification_failed", out
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert table_checksum(table) == expected == reference_checksum(table)
    assert not action_outputs(table)


def test_a_shared_delete_manifest_keeps_the_other_partitions_deletes_and_their_sequence_numbers(
        settings, spark, catalog):
    table = make_table(catalog, {DAY1: 2, DAY2: 2})
    day1, day2 = data_files(table, "day=2026-01-01"), data_files(table, "day=2026-01-02")
    # one manifest: an equality delete in day1 and a position delete in day2
    commit_delete_files(table, [
        write_equality_deletes(table, scope_of(table, day1[0]), ["id"], [{"id": 7}, {"id": 5007}]),
        write_position_deletes(table, scope_of(table, day2[0]), [(day2[0], 0)]),
    ])
    table.append(batch(5000, 20, DAY1))  # newer than the equality delete: id 5007 stays
    expected = reference_checksum(table)

    first = actions.execute(settings, _submit(settings, table, partition="day=2026-01-02"), spark=spark)
    assert first["state"] == "succeeded" and (first["files_in"], first["rows_out"]) == (1, 49), first
    # the day1 equality delete was carried into a rewritten manifest with its own sequence number
    assert reference_checksum(table) == expected
    second = actions.execute(settings, _submit(settings, table), spark=spark)

    assert second["state"] == "succeeded", second
    assert (second["files_in"], second["rows_in"], second["rows_out"]) == (2, 100, 99)
    assert delete_files(table) == []
    ids = _ids(table)
    assert 5007 in ids and 7 not in ids and 100 not in ids
    assert table_checksum(table) == expected == reference_checksum(table)
    _assert_clean(table, second)
