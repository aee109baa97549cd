"""Schema and partition evolution: the merge rewrites real evolved tables without losing, duplicating or
altering a value. Every rewrite is checked against pyiceberg's read of the table before and after (all
rows, sorted, and a hash of them) and against a second reader: pyarrow over the live files, resolving
columns by Parquet field id on its own."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import itertools
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.tables import identifier, live_files

pytestmark = pytest.mark.spark
_counter = itertools.count()
T0 = dt.datetime(2023, 12, 31, 22, 0, 0)


# ------------------------------------------------------------------------------------------ readers


def _canonical(value):
    if isinstance(value, dict):
        return tuple((k, _canonical(v)) for k, v in value.items())
    if isinstance(value, list):
        items = [_canonical(v) for v in value]
        # a map reads as a list of (key, value) tuples: entry order carries no meaning
        return tuple(sorted(items, key=repr)) if items and all(isinstance(v, tuple) and len(v) == 2
                                                               and not isinstance(v[0], tuple) for v in items) \
            else tuple(items)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def rows_of(data: pa.Table) -> list[tuple]:
    names = data.column_names
    return sorted((tuple(_canonical(r[n]) for n in names) for r in data.to_pylist()), key=repr)


def digest(rows: list[tuple]) -> tuple[int, str]:
    h = hashlib.sha256()
    for r in rows:
        h.update(repr(r).encode())
    return len(rows), h.hexdigest()


def pyiceberg_rows(table, row_filter=None) -> list[tuple]:
    table.refresh()
    scan = table.scan() if row_filter is None else table.scan(row_filter=row_filter)
    return rows_of(scan.to_arrow())


def _live_paths(table) -> list[str]:
    # not inspect.files(): pyiceberg 0.12 cannot build its readable metrics for a uuid column
    return sorted(t.file.file_path for t in table.scan().plan_files())


def second_reader_rows(table) -> list[tuple]:
    """pyarrow over every live file, columns resolved by field id here (not by pyiceberg's projection)."""
    table.refresh()
    target = table.scan().to_arrow().schema
    ids = {f.name: f.field_id for f in table.schema().fields}
    parts = []
    for path in _live_paths(table):
        data = pq.read_table(path.removeprefix("file://"))
        by_id = {int(f.metadata[b"PARQUET:field_id"]): i for i, f in enumerate(data.schema)
                 if f.metadata and b"PARQUET:field_id" in f.metadata}
        assert by_id, f"{path} has no field ids after the rewrite"
        columns = []
        for field in target:
            index = by_id.get(ids[field.name])
            want = field.type.storage_type if isinstance(field.type, pa.ExtensionType) else field.type
            if index is None:
                columns.append(pa.nulls(data.num_rows, want))
                continue
            column = data.column(index)
            if isinstance(column.type, pa.ExtensionType):  # uuid: compare the 16 stored bytes
                column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
            columns.append(column.cast(want))
        parts.append(pa.Table.from_arrays(columns, names=target.names))
    return rows_of(pa.concat_tables(parts))


def _merge(settings, spark, table, **options):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    action_id = actions.submit(settings, ident, partition=None, dispatch=False, options=options or None)
    out = actions.execute(settings, action_id, spark=spark)
    with session_scope(settings) as s:
        groups = (get_action(s, action_id).checkpoint or {}).get("groups") or []
    return out, groups


def _assert_same(table, before: list[tuple]) -> None:
    after = pyiceberg_rows(table)
    assert digest(after) == digest(before)
    assert after == before
    assert second_reader_rows(table) == before


def _new_table(catalog, schema, spec=None, properties=None):
    return catalog.create_table(f"test.evo_{next(_counter)}", schema=schema, partition_spec=spec or PartitionSpec(),
                                properties=properties or {})


def _arrow(table, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=table.schema().as_arrow())


# ------------------------------------------------------------------------------------ schema evolution

SPARK_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "i", IntegerType()),
    NestedField(3, "f", FloatType()),
    NestedField(4, "d", DecimalType(9, 2)),
    NestedField(5, "day", DateType()),
    NestedField(6, "tm", TimeType()),
    NestedField(7, "ts", TimestampType()),
    NestedField(8, "tstz", TimestamptzType()),
    NestedField(9, "s", StringType()),
    NestedField(10, "b", BinaryType()),
    NestedField(11, "st", StructType(NestedField(12, "a", IntegerType()), NestedField(13, "z", StringType()))),
    NestedField(14, "drop_me", StringType()),
)


def _spark_row(i: int, evolved: bool) -> dict:
    row = {
        "id": i, "i": i * 7 - 3, "f": i / 4, "d": decimal.Decimal(i * 101) / 100,
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i % 40), "tm": dt.time(i % 24, i % 60, 0, i),
        "ts": T0 + dt.timedelta(minutes=37 * i),
        "tstz": dt.datetime(2024, 3, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "b": bytes([i % 256, 0, 255]), "st": {"a": i if i % 5 else None, "z": f"z{i}"},
    }
    if evolved:
        row |= {"i": 3_000_000_000 + i, "f": i / 3, "d": decimal.Decimal(10**12 + i) / 100, "label": f"s{i}",
                "added": f"new-{i}" if i % 2 else None}
    else:
        row |= {"s": f"s{i}" if i % 3 else None, "drop_me": f"gone-{i}"}
    return row


@pytest.mark.parametrize("engine", ["spark", "spark_sql", "local"])
def test_each_path_rewrites_renamed_widened_dropped_and_added_columns(settings, spark, catalog, engine):
    table = _new_table(catalog, SPARK_SCHEMA)
    for start in (0, 20, 40):
        table.append(_arrow(table, [_spark_row(i, False) for i in range(start, start + 20)]))
    with table.update_schema() as update:
        update.rename_column("s", "label")
        update.update_column("i", LongType())
        update.update_column("f", DoubleType())
        update.update_column("d", DecimalType(18, 2))
        update.delete_column("drop_me")
        update.add_column("added", StringType())
        update.rename_column("st.z", "zed")
    for start in (100, 120):
        table.append(_arrow(table, [_spark_row(i, True) for i in range(start, start + 20)]))
    before = pyiceberg_rows(table)
    assert len(before) == 100

    out, groups = _merge(settings, spark, table, engine=engine)

    assert out["state"] == "succeeded", out
    assert [g["engine"] for g in groups] == [engine]
    assert (out["files_in"], out["files_out"], out["rows_out"]) == (5, 1, 100)
    assert out["checksum_in"] == out["checksum_out"]
    _assert_same(table, before)
    written = pq.read_schema(live_files(table)[0].removeprefix("file://"))
    assert "drop_me" not in written.names and written.field("i").type == pa.int64()
    assert written.field("d").type == pa.decimal128(18, 2) and written.field("tm").type == pa.time64("us")


ARROW_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "fx", FixedType(4)),
    NestedField(3, "u", UUIDType()),
    NestedField(4, "l", ListType(5, IntegerType(), element_required=False)),
    NestedField(6, "m", MapType(7, StringType(), 8, LongType(), value_required=False)),
    NestedField(9, "st", StructType(NestedField(10, "inner", ListType(11, StringType(), element_required=False)))),
    NestedField(12, "s", StringType()),
    NestedField(13, "n", IntegerType()),
)


def _arrow_row(i: int, evolved: bool) -> dict:
    row = {
        "id": i, "fx": bytes([i % 256, 1, 2, 3]), "u": uuid.UUID(int=i * 7919).bytes,
        "l": None if i % 7 == 0 else [i, None, -i], "m": [(f"k{i}", i), ("z", None)] if i % 4 else None,
        "st": {"inner": [f"a{i}", None]} if i % 3 else None,
    }
    return row | ({"label": f"s{i}", "n": 5_000_000_000 + i, "added": float(i)} if evolved
                  else {"s": f"s{i}", "n": i})


def test_arrow_path_rewrites_uuid_fixed_list_map_and_evolved_columns(settings, spark, catalog):
    table = _new_table(catalog, ARROW_SCHEMA)
    for start in (0, 30, 60):
        table.append(_arrow(table, [_arrow_row(i, False) for i in range(start, start + 30)]))
    with table.update_schema() as update:
        update.rename_column("s", "label")
        update.update_column("n", LongType())
        update.add_column("added", DoubleType())
    table.append(_arrow(table, [_arrow_row(i, True) for i in range(200, 230)]))
    before = pyiceberg_rows(table)
    assert len(before) == 120

    out, groups = _merge(settings, spark, table)

    assert out["state"] == "succeeded", out
    assert [g["engine"] for g in groups] == ["spark"]  # the default: a task on an executor
    assert out["rows_in"] == out["rows_out"] == 120 and out["checksum_in"] == out["checksum_out"]
    _assert_same(table, before)
    path = _live_paths(table)[0].removeprefix("file://")
    parquet = pq.ParquetFile(path).schema
    assert "fixed_len_byte_array(4)" in str(parquet.column(1)).lower() or \
        parquet.column(1).physical_type == "FIXED_LEN_BYTE_ARRAY"
    assert parquet.column(2).physical_type == "FIXED_LEN_BYTE_ARRAY" and parquet.column(2).length == 16
    written = pq.read_schema(path)
    element = written.field("l").type.value_field
    schema = table.schema()  # create_table assigns fresh ids
    assert element.metadata[b"PARQUET:field_id"] == str(schema.find_field("l").field_type.element_id).encode()
    key_id = schema.find_field("m").field_type.key_id
    assert written.field("m").type.key_field.metadata[b"PARQUET:field_id"] == str(key_id).encode()


def test_tampered_arrow_output_blocks_the_commit(settings, spark, catalog):
    from autooptimize.domain.actions import Hooks

    table = _new_table(catalog, ARROW_SCHEMA)
    for start in (0, 30):
        table.append(_arrow(table, [_arrow_row(i, False) for i in range(start, start + 30)]))
    snapshot = table.current_snapshot().snapshot_id

    def tamper(paths: list[str]) -> None:
        path = paths[0].removeprefix("file://")
        data = pq.read_table(path)
        index = data.schema.get_field_index("l")
        values = data.column(index).to_pylist()
        values[1] = [123456]  # one list element changed; rows and schema (with its field ids) kept
        data = data.set_column(index, data.schema.field(index), pa.array(values, data.schema.field(index).type))
        pq.write_table(data, path)

    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    action_id = actions.submit(settings, ident, partition=None, dispatch=False)
    out = actions.execute(settings, action_id, spark=spark, hooks=Hooks(after_write=tamper))

    assert out["state"] == "failed" and out["reason"] == "verification_failed", out
    assert "checksum" in out["error"]
    assert table.refresh().current_snapshot().snapshot_id == snapshot


def test_files_without_field_ids_are_read_by_name_in_their_own_group(settings, spark, catalog, tmp_path):
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "v", StringType()),
                    NestedField(3, "n", IntegerType()))
    table = _new_table(catalog, schema)
    plain = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int32())])  # no field ids
    added = []
    (tmp_path / "unused").mkdir()
    import os

    os.makedirs(f"{table.location().removeprefix('file://')}/data", exist_ok=True)
    for k in range(3):
        path = f"{table.location().removeprefix('file://')}/data/plain-{k}.parquet"
        ids = range(k * 25, k * 25 + 25)
        pq.write_table(pa.table({"id": list(ids), "v": [f"p{i}" for i in ids], "n": [i * 3 for i in ids]},
                                schema=plain), path)
        added.append(f"file://{path}")
    table.add_files(added)
    for k in range(3):
        ids = range(1000 + k * 25, 1000 + k * 25 + 25)
        table.append(_arrow(table, [{"id": i, "v": f"a{i}", "n": i} for i in ids]))
    with table.update_schema() as update:  # the name mapping keeps the old name as an alias
        update.rename_column("v", "label")
        update.update_column("n", LongType())
    before = pyiceberg_rows(table)
    assert len(before) == 150 and all(r[1] is not None for r in before)

    out, groups = _merge(settings, spark, table, engine="spark_sql")  # ids: Spark SQL; the others: executors

    assert out["state"] == "succeeded", out
    assert sorted(g["engine"] for g in groups) == ["spark", "spark_sql"]
    by_name = next(g for g in groups if g["engine"] == "spark")
    assert sorted(by_name["inputs"]) == sorted(added)  # never mixed with files that carry ids
    assert (out["files_in"], out["files_out"]) == (6, 2)
    _assert_same(table, before)


# --------------------------------------------------------------------------------- partition evolution

PART_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "s", StringType()),
    NestedField(3, "ts", TimestampType()),
)


def _part_rows(start: int, n: int) -> list[dict]:
    return [{"id": i, "s": f"{'abcdef'[i % 6]}{i % 4}x{i}", "ts": T0 + dt.timedelta(hours=5 * i)}
            for i in range(start, start + n)]


def test_older_spec_partition_merges_within_its_spec_and_partition(settings, spark, catalog):
    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"))
    table = _new_table(catalog, PART_SCHEMA, spec)
    for start in range(0, 80, 20):  # 4 files of one old-spec partition
        table.append(_arrow(table, [r | {"ts": T0} for r in _part_rows(start, 20)]))
    with table.update_spec() as update:
        update.remove_field("ts_day")
        update.add_field("s", TruncateTransform(1), "s_trunc")
    for start in range(500, 560, 20):
        table.append(_arrow(table, _part_rows(start, 20)))
    old_spec_id = 0
    before = pyiceberg_rows(table)

    out, groups = _merge(settings, spark, table)

    assert out["state"] == "succeeded", out
    old = [g for g in groups if g["spec_id"] == old_spec_id]
    assert len(old) == 1 and len(old[0]["inputs"]) == 4
    _assert_same(table, before)
    table.refresh()
    old_files = [t.file for t in table.scan().plan_files() if t.file.spec_id == old_spec_id]
    assert len(old_files) == 1
    assert old_files[0].partition[0] == (T0.date() - dt.date(1970, 1, 1)).days
    # pruning by the old spec's partition record finds exactly the old rows
    on_day = pyiceberg_rows(table, EqualTo("ts", T0.isoformat()))
    assert on_day == [r for r in before if r[2] == T0] and len(on_day) == 80


TRANSFORMS = {
    "identity": (2, IdentityTransform(), EqualTo("s", "a0x0"), lambda r: r[1] == "a0x0"),
    "year": (3, YearTransform(), GreaterThanOrEqual("ts", "2024-01-01T00:00:00"), lambda r: r[2].year >= 2024),
    "month": (3, MonthTransform(), LessThan("ts", "2024-01-01T00:00:00"), lambda r: r[2].year < 2024),
    "day": (3, DayTransform(), EqualTo("ts", (T0 + dt.timedelta(hours=5 * 7)).isoformat()),
            lambda r: r[2] == T0 + dt.timedelta(hours=35)),
    "hour": (3, HourTransform(), GreaterThanOrEqual("ts", "2024-01-05T00:00:00"),
             lambda r: r[2] >= dt.datetime(2024, 1, 5)),
    "bucket": (1, BucketTransform(4), EqualTo("id", 13), lambda r: r[0] == 13),
    "truncate": (2, TruncateTransform(1), GreaterThanOrEqual("s", "d"), lambda r: r[1] >= "d"),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_respec_moves_older_spec_files_into_the_current_spec(settings, spark, catalog, name):
    source_id, transform, row_filter, keep = TRANSFORMS[name]
    table = _new_table(catalog, PART_SCHEMA)  # spec 0: unpartitioned
    for start in range(0, 60, 20):
        table.append(_arrow(table, _part_rows(start, 20)))
    column = PART_SCHEMA.find_field(source_id).name
    with table.update_spec() as update:
        update.add_field(column, transform, f"{column}_{name}")
    table.append(_arrow(table, _part_rows(60, 20)))  # one file already in the current spec
    before = pyiceberg_rows(table)
    current = table.spec()

    out, groups = _merge(settings, spark, table, respec="true")

    assert out["state"] == "succeeded", out
    _assert_same(table, before)
    table.refresh()
    files = table.inspect.files().to_pylist()
    assert {f["spec_id"] for f in files} == {current.spec_id}, "every row now lives in the current spec"
    assert len({str(f["partition"]) for f in files}) > 1
    moved = [g for g in groups if "output_partitions" in g]
    assert moved and sum(len(g["inputs"]) for g in moved) == 3
    # pyiceberg prunes by the new partition values: a wrong partition record would lose rows here
    assert pyiceberg_rows(table, row_filter) == [r for r in before if keep(r)]
    assert [r for r in before if keep(r)], "the filter must select something"
    field = current.fields[0]
    source_type = table.schema().find_field(field.source_id).field_type
    for task in table.scan().plan_files():  # every file holds only rows of the partition it is recorded under
        data = pq.read_table(task.file.file_path.removeprefix("file://"))
        values = field.transform.pyarrow_transform(source_type)(data.column(column))
        assert set(values.to_pylist()) == {task.file.partition[0]}


def test_older_spec_without_respec_keeps_its_spec(settings, spark, catalog):
    table = _new_table(catalog, PART_SCHEMA)
    for start in range(0, 60, 20):
        table.append(_arrow(table, _part_rows(start, 20)))
    with table.update_spec() as update:
        update.add_field("id", BucketTransform(4), "id_bucket")
    before = pyiceberg_rows(table)

    out, groups = _merge(settings, spark, table)

    assert out["state"] == "succeeded", out
    assert [g["spec_id"] for g in groups] == [0] and "output_partitions" not in groups[0]
    _assert_same(table, before)
    assert {f["spec_id"] for f in table.refresh().inspect.files().to_pylist()} == {0}


def test_respec_option_is_validated(settings, catalog):
    from autooptimize.errors import InvalidArgument

    table = _new_table(catalog, PART_SCHEMA)
    table.append(_arrow(table, _part_rows(0, 5)))
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    with pytest.raises(InvalidArgument, match="respec"):
        actions.submit(settings, ident, dispatch=False, options={"respec": "maybe"})
    with pytest.raises(InvalidArgument, match="valid options: respec"):
        actions.submit(settings, ident, dispatch=False, options={"colour": "red"})
