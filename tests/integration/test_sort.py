"""The sort action on real tables: disjoint ranges of the first sort column, rows sorted in each file,
rows and content unchanged (pyiceberg's read and a second reader), ordered runs kept in order."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import IdentityTransform

from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.commit import ACTION_KIND_PROPERTY
from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.tables import (
    ARROW,
    DAY1,
    DAY2,
    SCHEMA,
    SPEC,
    files_on_disk,
    identifier,
    live_files,
    second_reader_checksum,
)

pytestmark = pytest.mark.spark


def _rows(ids: list[int], day=DAY1) -> pa.Table:
    return pa.table({"id": ids, "day": [day] * len(ids), "v": [f"value-{i}" for i in ids],
                     "x": [None if i % 7 == 0 else i * 0.25 for i in ids]}, schema=ARROW)


def _interleaved(catalog, name, files=12, rows=400, **create):
    """Each file holds ids k, k+files, k+2·files…: every file's id range overlaps every other's."""
    table = catalog.create_table(f"test.{name}", schema=SCHEMA, partition_spec=SPEC, **create)
    for k in range(files):
        table.append(_rows([k + files * j for j in range(rows)]))
    table.append(_rows(list(range(5)), DAY2))
    return table


def _id_ranges(table, day="day=2026-01-01"):
    spans = []
    for path in live_files(table):
        if day not in path:
            continue
        ids = pq.read_table(path.removeprefix("file://"), columns=["id"])["id"].to_pylist()
        spans.append(ids)
    return spans


def _run(settings, spark, table, partition="day=2026-01-01", **options):
    action_id = actions.submit(settings, identifier(table), partition=partition, kind="sort", dispatch=False,
                               options=options or None)
    return actions.execute(settings, action_id, spark=spark)


@pytest.mark.parametrize("engine", ["spark", "spark_sql", "local"])
def test_sort_writes_disjoint_sorted_files_and_keeps_every_row(settings, spark, catalog, engine):
    table = _interleaved(catalog, f"sort_interleaved_{engine}")
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="4KiB", sort_order="id")
    before, second = table_checksum(table), second_reader_checksum(table)
    day2 = {p for p in live_files(table) if "day=2026-01-02" in p}

    out = _run(settings, spark, table, engine=engine)

    assert out["state"] == "succeeded", out
    with session_scope(settings) as s:
        assert {g["engine"] for g in get_action(s, out["id"]).checkpoint["groups"]} == {engine}
    assert out["rows_in"] == out["rows_out"] == 12 * 400
    assert out["checksum_in"] == out["checksum_out"]
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second
    assert day2 <= set(live_files(table))
    files = _id_ranges(table)
    assert len(files) == out["files_out"] >= 2
    for ids in files:
        assert ids == sorted(ids), "a file is not sorted"
    spans = sorted((min(ids), max(ids)) for ids in files)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
    assert table.current_snapshot().summary[ACTION_KIND_PROPERTY] == "sort"
    assert not [f for f in files_on_disk(table) if f.endswith(".crc") or "/_" in f]


def test_sort_follows_the_tables_own_sort_order_and_records_its_id(settings, spark, catalog):
    order = SortOrder(SortField(source_id=1, transform=IdentityTransform(), direction=SortDirection.DESC,
                                null_order=NullOrder.NULLS_LAST))
    table = _interleaved(catalog, "sort_table_order", files=6, rows=300, sort_order=order)
    tracking.track(settings, identifier(table), target_file_size="2KiB")
    before = table_checksum(table)

    out = _run(settings, spark, table)

    assert out["state"] == "succeeded", out
    assert table_checksum(table) == before
    for ids in _id_ranges(table):
        assert ids == sorted(ids, reverse=True)
    order_id = table.sort_order().order_id
    entries = table.inspect.files().to_pylist()
    assert {e["sort_order_id"] for e in entries if e["partition"]["day"] == DAY1} == {order_id}


def test_sort_by_an_option_with_nulls_last(settings, spark, catalog):
    table = _interleaved(catalog, "sort_option", files=5, rows=200)
    tracking.track(settings, identifier(table), target_file_size="1MiB")
    before = table_checksum(table)
    out = _run(settings, spark, table, sort_order="x DESC NULLS LAST")
    assert out["state"] == "succeeded", out
    assert table_checksum(table) == before
    [path] = [p for p in live_files(table) if "day=2026-01-01" in p]
    xs = pq.read_table(path.removeprefix("file://"), columns=["x"])["x"].to_pylist()
    values = [x for x in xs if x is not None]
    assert values == sorted(values, reverse=True) and xs[len(values):] == [None] * (len(xs) - len(values))


def test_already_ordered_files_are_merged_in_runs_and_stay_disjoint(settings, spark, catalog):
    table = catalog.create_table("test.sort_ordered", schema=SCHEMA, partition_spec=SPEC)
    for k in range(10):  # ten files of consecutive id ranges: disjoint, in order
        table.append(_rows(list(range(k * 100, k * 100 + 100))))
    tracking.track(settings, identifier(table), target_file_size="1MiB", sort_order="id")
    before, second = table_checksum(table), second_reader_checksum(table)

    out = _run(settings, spark, table)

    assert out["state"] == "succeeded", out
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second
    files = _id_ranges(table)
    assert all(ids == sorted(ids) for ids in files)
    spans = sorted((min(ids), max(ids)) for ids in files)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))
    # once merged, a second sort finds nothing to do
    again = _run(settings, spark, table)
    assert again["state"] == "skipped" and again["reason"] in ("already_sorted", "nothing_to_sort"), again


def test_sort_without_a_sort_order_is_refused_and_bad_options_change_nothing(settings, spark, catalog):
    table = _interleaved(catalog, "sort_none", files=3, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    snapshot = table.current_snapshot().snapshot_id
    out = _run(settings, spark, table)
    assert out["state"] == "refused" and out["reason"] == "no_sort_order", out
    with pytest.raises(InvalidArgument, match="not a column"):
        actions.submit(settings, ident, kind="sort", dispatch=False, options={"sort_order": "nope"})
    with pytest.raises(InvalidArgument, match="ASC"):
        actions.submit(settings, ident, kind="sort", dispatch=False, options={"sort_order": "id SIDEWAYS"})
    with pytest.raises(InvalidArgument, match="unknown option"):
        actions.submit(settings, ident, kind="sort", dispatch=False, options={"colour": "red"})
    with pytest.raises(InvalidArgument, match="sort_order|not a column"):
        tracking.track(settings, ident, sort_order="id, missing")
    assert table.refresh().current_snapshot().snapshot_id == snapshot
