"""The merge action against real tables, PostgreSQL and a Spark Connect server."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

from autooptimize.domain.actions import Hooks
from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from autooptimize.services.preview import preview
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit_events
from tests.integration.tables import (
    DAY1,
    DAY2,
    action_outputs,
    batch,
    files_on_disk,
    identifier,
    live_files,
    make_table,
    second_reader_checksum,
    unreferenced_manifests,
)

pytestmark = pytest.mark.spark


class Crash(BaseException):
    """Stands for the worker dying at a chosen point (not an Exception: nothing may catch it)."""


def _submit(settings, table, partition="day=2026-01-01", **kw):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return actions.submit(settings, ident, partition=partition, dispatch=False, **kw)


def _snapshots_with(table, action_id):
    table.refresh()
    return [s for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def test_merge_rewrites_small_files_and_keeps_every_row(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 6, DAY2: 3})
    before_checksum = table_checksum(table)
    before_second = second_reader_checksum(table)
    day2_files = {p for p in live_files(table) if "day=2026-01-02" in p}

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (6, 1)
    assert out["rows_in"] == out["rows_out"] == 300
    assert out["checksum_in"] == out["checksum_out"]
    assert table_checksum(table) == before_checksum
    assert second_reader_checksum(table) == before_second
    files = live_files(table)
    assert len(files) == 4
    assert day2_files <= set(files), "another partition was touched"
    snapshot = table.current_snapshot()
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary[ACTION_ID_PROPERTY] == action_id
    assert snapshot.snapshot_id == out["snapshot_id"]
    # the inputs' DELETED manifest was written while the Spark job ran, and that commit took it
    assert out["timings"]["commit.stage_ahead"] > 0
    assert not unreferenced_manifests(table)
    # nothing outside the table, no .crc or _SUCCESS files, every output under the table's data path
    on_disk = files_on_disk(table)
    assert not [f for f in on_disk if f.endswith(".crc") or "/_" in f or "/." in f]
    location = table.location().removeprefix("file://")
    assert all(f.startswith(location) for f in on_disk)
    with session_scope(settings) as s:
        events = [e.event for e in audit_events(s, action_id)]
    assert events == ["action.submitted", "action.started", "action.checkpointed", "action.succeeded"]


def test_rerunning_a_finished_action_changes_nothing(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    action_id = _submit(settings, table)
    first = actions.execute(settings, action_id, spark=spark)
    snapshot = table.refresh().current_snapshot().snapshot_id
    again = actions.execute(settings, action_id, spark=spark)
    assert first["state"] == again["state"] == "succeeded"
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert len(_snapshots_with(table, action_id)) == 1


def test_append_to_same_partition_during_merge_neither_fails_nor_loses_rows(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 5})
    late = batch(10_000, 70, DAY1)
    expected = arrow_checksum(pa.concat_tables([table.scan().to_arrow(), late.cast(table.scan().to_arrow().schema)]))

    def append_concurrently() -> None:
        writer = catalog.load_table(identifier(table))
        writer.append(late)

    action_id = _submit(settings, table)
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(before_commit=append_concurrently))

    assert out["state"] == "succeeded", out
    assert table_checksum(table) == expected
    assert second_reader_checksum(table)[0] == 5 * 50 + 70
    # the late file is live next to the merged output
    assert len(live_files(table)) == 2
    assert len(_snapshots_with(table, action_id)) == 1


def test_concurrent_delete_of_an_input_aborts_and_removes_the_output(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    written: list[str] = []
    state_after_delete = {}

    def delete_first_file() -> None:
        writer = catalog.load_table(identifier(table))
        writer.delete(And(EqualTo("day", "2026-01-01"), GreaterThanOrEqual("id", 0), LessThan("id", 50)))
        writer.refresh()
        state_after_delete["snapshot"] = writer.current_snapshot().snapshot_id
        state_after_delete["checksum"] = table_checksum(writer)

    action_id = _submit(settings, table)
    out = actions.execute(
        settings, action_id, spark=spark,
        hooks=Hooks(after_write=written.extend, before_commit=delete_first_file),
    )

    assert out["state"] == "aborted", out
    assert out["reason"] == "conflict"
    assert written and not any(__import__("os").path.exists(p.removeprefix("file://")) for p in written)
    table.refresh()
    assert table.current_snapshot().snapshot_id == state_after_delete["snapshot"]
    assert table_checksum(table) == state_after_delete["checksum"]
    assert not action_outputs(table)
    assert not unreferenced_manifests(table)


def test_crash_between_commit_and_bookkeeping_commits_once(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    checksum = table_checksum(table)

    def crash(_snapshot_id: int) -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_commit=crash))
    assert actions.get_outcome(settings, action_id)["state"] == "running"
    committed = table.refresh().current_snapshot().snapshot_id

    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded"
    assert out["reason"] == "already_committed"
    assert out["snapshot_id"] == committed
    assert out["files_in"] == 4 and out["rows_out"] == 200
    assert table.refresh().current_snapshot().snapshot_id == committed
    assert len(_snapshots_with(table, action_id)) == 1
    assert table_checksum(table) == checksum


def test_crash_before_commit_resumes_from_checkpoint_without_rewriting(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    checksum = table_checksum(table)

    def crash() -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(before_commit=crash))
    checkpointed = actions.get_outcome(settings, action_id)
    assert checkpointed["state"] == "running"

    rewrites: list[list[str]] = []
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=rewrites.append))

    assert out["state"] == "succeeded" and out["reason"] == "resumed_from_checkpoint"
    assert rewrites == [], "a checkpointed output must be committed without rewriting"
    assert len(_snapshots_with(table, action_id)) == 1
    assert table_checksum(table) == checksum
    assert len(live_files(table)) == 1


def test_crash_during_write_leaves_no_stray_files_after_retry(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    checksum = table_checksum(table)

    def crash(_paths: list[str]) -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=crash))
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded"
    assert table_checksum(table) == checksum
    live = {p.removeprefix("file://") for p in live_files(table)}
    data_on_disk = {f for f in files_on_disk(table) if f.endswith(".parquet")}
    stray = {f for f in data_on_disk - live if f in action_outputs(table)}
    assert not stray, stray


def test_renamed_column_keeps_its_values(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 3})
    with table.update_schema() as update:
        update.rename_column("v", "label")
    renamed = batch(500, 50, DAY1).rename_columns(["id", "day", "label", "x"])
    table.append(renamed)
    before = table.scan().to_arrow()
    assert before["label"].null_count == 0

    out = actions.execute(settings, _submit(settings, table), spark=spark)

    assert out["state"] == "succeeded", out
    after = table.refresh().scan().to_arrow()
    assert after["label"].null_count == 0
    assert sorted(after["label"].to_pylist()) == sorted(before["label"].to_pylist())
    assert arrow_checksum(after) == arrow_checksum(before)


def test_required_columns_stay_required(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 3})
    out = actions.execute(settings, _submit(settings, table), spark=spark)
    assert out["state"] == "succeeded"
    table.refresh()
    assert table.schema().find_field("id").required
    assert table.schema().find_field("day").required
    arrow_schema = table.scan().to_arrow().schema
    assert not arrow_schema.field("id").nullable
    assert not arrow_schema.field("day").nullable


def test_checksum_mismatch_blocks_the_commit(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    snapshot = table.current_snapshot().snapshot_id
    checksum = table_checksum(table)

    def tamper(paths: list[str]) -> None:
        # same row count and schema (field ids kept), one value changed: only the checksum can tell
        path = paths[0].removeprefix("file://")
        data = pq.read_table(path)
        values = data.column("v").to_pylist()
        values[0] = "tampered"
        index = data.schema.get_field_index("v")
        data = data.set_column(index, data.schema.field(index), pa.array(values, data.schema.field(index).type))
        pq.write_table(data, path)

    out = actions.execute(settings, _submit(settings, table), spark=spark, hooks=Hooks(after_write=tamper))

    assert out["state"] == "failed"
    assert out["reason"] == "verification_failed"
    assert "checksum" in out["error"]
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
    assert table_checksum(table) == checksum
    assert not action_outputs(table)
    assert not unreferenced_manifests(table), "what was written ahead for the commit is removed"


def test_partition_under_threshold_or_alone_is_skipped(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 1, DAY2: 3})
    out = actions.execute(settings, _submit(settings, table), spark=spark)
    assert out["state"] == "skipped"
    assert out["reason"] == "nothing_to_merge"
    assert len(live_files(table)) == 4


def test_whole_table_action_merges_every_partition_in_one_commit(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 3})
    checksum = table_checksum(table)
    out = actions.execute(settings, _submit(settings, table, partition=None), spark=spark)
    assert out["state"] == "succeeded"
    assert (out["files_in"], out["files_out"]) == (6, 2)
    assert len(_snapshots_with(table, out["id"])) == 1
    assert table_checksum(table) == checksum


def test_dry_run_plans_without_changing_anything(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    snapshot = table.current_snapshot().snapshot_id
    files = set(live_files(table))
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    out = preview(settings, ident, partition="day=2026-01-01")
    assert out["state"] == "skipped" and out["reason"] == "dry_run" and out["id"] is None
    groups = out["plan"]["partitions"][0]["groups"]
    assert {p for g in groups for p in g["files"]} == files
    assert table.refresh().current_snapshot().snapshot_id == snapshot


def test_unexpected_error_fails_the_action_and_removes_its_output(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})
    snapshot = table.current_snapshot().snapshot_id

    def boom(_paths: list[str]) -> None:
        raise RuntimeError("disk on fire")

    out = actions.execute(settings, _submit(settings, table), spark=spark, hooks=Hooks(after_write=boom))

    assert out["state"] == "failed" and out["reason"] == "error"
    assert "disk on fire" in out["error"]
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert not action_outputs(table)
    assert not unreferenced_manifests(table), "what was written ahead for the commit is removed"


def test_retries_exhausted_after_a_crash_cleans_up(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4})

    def crash() -> None:
        raise Crash()

    action_id = _submit(settings, table)
    with pytest.raises(Crash):
        actions.execute(settings, action_id, spark=spark, hooks=Hooks(before_commit=crash))
    assert action_outputs(table)
    out = actions.fail_permanently(settings, action_id, "Spark Connect unreachable")
    assert out["state"] == "failed" and out["reason"] == "retries_exhausted"
    assert not action_outputs(table)
    assert len(live_files(table)) == 4


def test_explain_is_what_optimize_then_does(binpack_settings, spark, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    import json
    import os
    import subprocess
    import sys

    table = make_table(catalog, {DAY1: 7, DAY2: 1})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    snapshot = table.refresh().current_snapshot().snapshot_id
    result = subprocess.run([sys.executable, "-m", "autooptimize.cli", "explain", ident, "--json"],
                            capture_output=True, text=True, env=os.environ, timeout=120)
    assert result.returncode == 0, result.stderr
    explained = {p["partition"]: p for p in json.loads(result.stdout)["partitions"]}
    assert explained["day=2026-01-02"]["action"] == "none"
    plan = explained["day=2026-01-01"]
    assert plan["action"] == "merge" and plan["files_replaced"] == 7
    assert {"partition", "action", "reason", "groups", "bytes_rewritten", "files_replaced", "mse_before",
            "mse_after"} <= set(plan)
    assert table.refresh().current_snapshot().snapshot_id == snapshot  # explain changed nothing

    out = actions.execute(settings, actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False),
                          spark=spark)
    assert out["state"] == "succeeded"
    executed = actions.get_outcome(settings, out["id"])
    with session_scope(settings) as s:
        from autooptimize.storage.repositories import get_action

        groups = get_action(s, out["id"]).checkpoint["groups"]
    assert [sorted(g["inputs"]) for g in groups] == [sorted(g["files"]) for g in plan["groups"]]
    assert executed["files_out"] == sum(g["files_out"] for g in plan["groups"])
