"""An empty string is a value, not a null: identity partitions on a string column holding ``''``, NULL
and the string ``"null"`` keep each value apart through a merge and through buffered writes."""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, IsNull
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from autooptimize.iceberg.checksum import table_checksum
from autooptimize.services import actions, tracking
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.services.buffer.landing import land
from tests.integration.tables import live_files

pytestmark = pytest.mark.spark

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="s"))
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
VALUES = ("", None, "null")
_names = itertools.count()


def _rows(first: int, count: int, value: str | None) -> pa.Table:
    return pa.table({"id": list(range(first, first + count)), "s": [value] * count}, schema=ARROW)


def _by_value(table) -> dict[str | None, list[int]]:
    """Ids per value of ``s`` as pyiceberg's scan reads them (no filter)."""
    table.refresh()
    out: dict[str | None, list[int]] = {}
    for row in table.scan().to_arrow().to_pylist():
        out.setdefault(row["s"], []).append(row["id"])
    return {k: sorted(v) for k, v in out.items()}


def _filtered(table) -> dict[str | None, list[int]]:
    """Ids per value read with a filter on ``s``: partition pruning must find every row."""
    table.refresh()
    out = {}
    for value in VALUES:
        where = IsNull("s") if value is None else EqualTo("s", value)
        out[value] = sorted(table.scan(row_filter=where, selected_fields=("id",)).to_arrow()["id"].to_pylist())
    return out


def _recorded_partitions(table) -> dict[str, set[str | None]]:
    """Each live file's recorded partition value against the values of ``s`` inside it."""
    table.refresh()
    out: dict[str, set[str | None]] = {}
    for entry in table.inspect.files().select(["file_path", "partition"]).to_pylist():
        path = entry["file_path"].removeprefix("file://")
        inside = set(pq.read_table(path, columns=["s"])["s"].to_pylist())
        out[path] = {entry["partition"]["s"]} | inside
    return out


def test_merge_keeps_empty_string_null_and_the_string_null_apart(settings, spark, catalog):
    table = catalog.create_table(f"test.empty_{next(_names)}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ids = itertools.count()
    expected: dict[str | None, list[int]] = {}
    for value in VALUES:
        for _ in range(3):
            first = next(ids) * 10
            table.append(_rows(first, 10, value))
            expected.setdefault(value, []).extend(range(first, first + 10))
    checksum = table_checksum(table)
    ident = ".".join(table.name()[-2:])
    tracking.track(settings, ident, target_file_size="1MiB")

    action_id = actions.submit(settings, ident, dispatch=False)
    out = actions.execute(settings, action_id, spark=spark)

    assert out["state"] == "succeeded", out
    assert (out["files_in"], out["files_out"]) == (9, 3)
    assert _by_value(table) == expected
    assert _filtered(table) == expected
    assert table_checksum(table) == checksum
    for path, values in _recorded_partitions(table).items():
        assert len(values) == 1, f"{path} holds rows of another partition than the one recorded: {values}"


def test_buffered_writes_keep_empty_string_and_null_apart(settings, spark, catalog, tmp_path):
    table = catalog.create_table(f"test.empty_buf_{next(_names)}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = ".".join(table.name()[-2:])
    files = []
    expected: dict[str | None, list[int]] = {}
    for i, value in enumerate(VALUES * 2):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(_rows(i * 10, 10, value), path)
        files.append(path)
        expected.setdefault(value, []).extend(range(i * 10, i * 10 + 10))
    landed = land(settings, ident, files, notify=False)
    assert len(landed["landed"]) == 6, landed

    out = consolidate_table(settings, ident, spark=spark, flush=True)

    assert [b["state"] for b in out["batches"]] == ["done"], out
    assert _by_value(table) == {k: sorted(v) for k, v in expected.items()}
    assert _filtered(table) == {k: sorted(v) for k, v in expected.items()}
    for path, values in _recorded_partitions(table).items():
        assert len(values) == 1, f"{path} holds rows of another partition than the one recorded: {values}"
    assert len(live_files(table)) == 3
