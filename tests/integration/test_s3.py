"""Actions on an ``s3://`` warehouse served on loopback by a real S3-protocol server (moto's server
mode, spoken to over HTTP). Nothing here patches a client: the catalog's FileIO properties (endpoint,
keys, region, path-style) reach pyiceberg, the service's listing and deletes, and Spark's Python
workers, and each case checks rows and the content checksum as on ``file://``."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.fileio import list_files
from autooptimize.services import actions, tracking
from autooptimize.services.rewrite.outputs import action_dirs
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.tables import DAY1, DAY2, identifier, live_files, make_table

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def _second_reader(table) -> tuple[int, int]:
    """Rows and Σ id read with plain pyarrow through the table's FileIO, not through pyiceberg's scan."""
    rows = total = 0
    for path in live_files(table):
        with table.io.new_input(path).open() as stream:
            data = pq.read_table(stream, columns=["id"])
        rows += data.num_rows
        total += sum(data["id"].to_pylist())
    return rows, total


def test_merge_on_s3_rewrites_through_spark_workers_and_keeps_every_row(s3_settings, s3_catalog, spark):
    table = make_table(s3_catalog, {DAY1: 6, DAY2: 3}, rows=40)
    assert table.location().startswith("s3://lake/wh/")
    ident = identifier(table)
    tracking.track(s3_settings, ident, target_file_size="1MiB")
    before, second = table_checksum(table), _second_reader(table)
    files_before = live_files(table)

    action_id = actions.submit(s3_settings, ident, dispatch=False)
    out = actions.execute(s3_settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["rows_in"], out["checksum_in"]) == (out["rows_out"], out["checksum_out"])
    after = live_files(table)
    assert len(after) == 2 and not set(after) & set(files_before)
    assert all(p.startswith(table.location() + "/data/") for p in after)
    with session_scope(s3_settings) as s:
        groups = get_action(s, action_id).checkpoint["groups"]
    assert [g["engine"] for g in groups] == ["spark", "spark"]  # in Spark tasks, not here
    assert table_checksum(table) == before
    assert _second_reader(table) == second
    # nothing the action wrote is left beside what it committed
    written = list_files(table.io, table.location() + "/data", ".parquet")
    assert set(written) == set(after) | set(files_before)
    for directory in action_dirs(table, action_id):  # the outputs' own directories hold only them
        assert set(list_files(table.io, directory)) <= set(after)


def test_a_failed_merge_on_s3_removes_what_it_wrote(s3_settings, s3_catalog, spark):
    from autooptimize.domain.actions import Hooks

    table = make_table(s3_catalog, {DAY1: 4}, rows=20)
    ident = identifier(table)
    tracking.track(s3_settings, ident, target_file_size="1MiB")
    snapshot = table.current_snapshot().snapshot_id
    files_before = set(list_files(table.io, table.location() + "/data"))
    wrote: list[str] = []

    def boom(*_args) -> None:
        wrote.extend(list_files(table.io, table.location() + "/data"))
        raise RuntimeError("disk on fire")

    out = actions.execute(s3_settings, actions.submit(s3_settings, ident, dispatch=False), spark=spark,
                          hooks=Hooks(after_write=boom))
    assert out["state"] == "failed" and "disk on fire" in out["error"]
    assert set(wrote) > files_before, "the group was written to the store before the failure"
    assert table.refresh().current_snapshot().snapshot_id == snapshot
    assert set(list_files(table.io, table.location() + "/data")) == files_before


def test_manifest_rewrite_expiry_and_orphans_on_s3(s3_settings, s3_catalog):
    """The hygiene actions list, read and delete through the table's FileIO on the store."""
    import time

    table = make_table(s3_catalog, {DAY1: 4, DAY2: 2}, rows=10)
    ident = identifier(table)
    tracking.track(s3_settings, ident, allowed_actions="merge,rewrite_manifests,expire_snapshots,remove_orphans")
    before, second = table_checksum(table), _second_reader(table)

    manifests = actions.execute(s3_settings, actions.submit(
        s3_settings, ident, kind="rewrite_manifests", options={"manifest_threshold": "2"}, dispatch=False), spark=None)
    assert manifests["state"] == "succeeded", manifests
    assert manifests["files_in"] == 6 and manifests["files_out"] >= 1

    time.sleep(1.1)
    snapshots = len(table.refresh().metadata.snapshots)
    expired = actions.execute(s3_settings, actions.submit(
        s3_settings, ident, kind="expire_snapshots",
        options={"older_than": "1s", "allow_short_retention": "true", "retain_last": "1"}, dispatch=False), spark=None)
    assert expired["state"] == "succeeded", expired
    assert len(table.refresh().metadata.snapshots) == 1 < snapshots
    assert expired["plan"]["deleted"]["bytes_deleted"] > 0  # manifest lists and manifests gone from the store

    stray = table.location() + "/data/day=2026-01-01/stray-orphan.parquet"
    with table.io.new_output(stray).create() as out:
        out.write(b"not referenced by any snapshot")
    time.sleep(2.1)  # a store's modification times are whole seconds: let the stray age past min_age
    orphans = actions.execute(s3_settings, actions.submit(
        s3_settings, ident, kind="remove_orphans", options={"min_age": "1s", "allow_short_min_age": "true"},
        dispatch=False), spark=None)
    assert orphans["state"] == "succeeded", orphans["plan"]
    assert stray not in list_files(table.io, table.location() + "/data")
    assert table_checksum(table) == before and _second_reader(table) == second


def test_sort_on_s3_runs_in_spark_tasks_and_writes_disjoint_sorted_files(s3_settings, s3_catalog, spark):
    import random

    import pyarrow as pa

    from tests.integration.tables import ARROW, SCHEMA, SPEC

    table = s3_catalog.create_table(f"test.sorted_{random.randrange(10**9)}", schema=SCHEMA, partition_spec=SPEC)
    ids = list(range(600))
    random.Random(3).shuffle(ids)
    for k in range(6):  # six files whose id ranges all overlap
        chunk = ids[k * 100:(k + 1) * 100]
        table.append(pa.table({"id": chunk, "day": [DAY1] * 100, "v": [f"value-{i}" for i in chunk],
                               "x": [i * 0.5 for i in chunk]}, schema=ARROW))
    ident = identifier(table)
    # small enough for several files once the output size is calibrated on an executor
    tracking.track(s3_settings, ident, target_file_size="1KiB", sort_order="id")
    before, second = table_checksum(table), _second_reader(table)

    action_id = actions.submit(s3_settings, ident, partition="day=2026-01-01", kind="sort", dispatch=False)
    out = actions.execute(s3_settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["rows_in"], out["checksum_in"]) == (out["rows_out"], out["checksum_out"]) and out["rows_in"] == 600
    with session_scope(s3_settings) as s:
        assert {g["engine"] for g in get_action(s, action_id).checkpoint["groups"]} == {"spark"}
    assert table_checksum(table) == before and _second_reader(table) == second
    spans = []
    for path in live_files(table):
        with table.io.new_input(path).open() as stream:
            got = pq.read_table(stream, columns=["id"])["id"].to_pylist()
        assert got == sorted(got), "a file is not sorted"
        spans.append((min(got), max(got)))
    spans.sort()
    assert len(spans) == out["files_out"] >= 2
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
