"""A reader that maps a column to the wrong field cannot verify its own rewrite: the inputs and the
outputs are also read by field id with plain pyarrow, and the two readers must agree (real tables,
PostgreSQL, Spark Connect).

The Spark session here reads Parquet by column name (``spark.sql.parquet.fieldId.read.enabled`` off),
as a Spark server configured differently would; before, Spark's own digests of input and output then
agreed with each other and a rewrite that swapped two columns was committed.
"""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from autooptimize.domain.actions import Hooks
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.services import actions, tracking
from tests.integration.tables import action_outputs, live_files

pytestmark = pytest.mark.spark

SCHEMA = Schema(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=False))
ARROW = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.int64())])
_names = itertools.count()


@pytest.fixture()
def by_name(spark):
    """The session reads Parquet columns by name, not by field id, for the test's duration."""
    key = "spark.sql.parquet.fieldId.read.enabled"
    spark.conf.set(key, "false")
    try:
        yield spark
    finally:
        spark.conf.set(key, "true")


def _table(catalog):
    table = catalog.create_table(f"test.mapping_{next(_names)}_{os.getpid()}", schema=SCHEMA)
    for i in range(3):
        table.append(pa.table({"a": list(range(i * 10, i * 10 + 10)), "b": list(range(1000, 1010))}, schema=ARROW))
    return table


def _merge(settings, table, spark, hooks=None):
    ident = ".".join(table.name()[-2:])
    tracking.track(settings, ident, target_file_size="1MiB")
    # Spark SQL's reader is the subject here (the pyarrow path reads through pyiceberg's name mapping)
    action_id = actions.submit(settings, ident, dispatch=False, options={"engine": "spark_sql"})
    return actions.execute(settings, action_id, spark=spark, hooks=hooks)


def test_inputs_read_by_name_after_a_rename_are_caught(settings, by_name, catalog):
    """a and b swap names: Spark by name reads field 1 as b and field 2 as a, and writes them so."""
    table = _table(catalog)
    for old, new in (("a", "tmp"), ("b", "a"), ("tmp", "b")):
        with table.update_schema() as update:
            update.rename_column(old, new)
    checksum = table_checksum(table)
    files = sorted(live_files(table))

    out = _merge(settings, table, by_name)

    assert (out["state"], out["reason"]) == ("failed", "verification_failed"), out
    assert "read the inputs" in out["error"] and "differently" in out["error"]
    assert table_checksum(table) == checksum and sorted(live_files(table)) == files
    assert not action_outputs(table)


def _swap_field_ids(paths: list[str]) -> None:
    """Rewrite each output with the field ids of a and b exchanged (names, values and order kept)."""
    for uri in paths:
        path = uri.removeprefix("file://")
        data = pq.read_table(path)
        ids = {"a": b"2", "b": b"1"}
        schema = pa.schema([f.with_metadata({b"PARQUET:field_id": ids[f.name]}) for f in data.schema])
        pq.write_table(data.cast(schema), path)


def test_outputs_whose_field_ids_are_mapped_wrong_are_caught(settings, by_name, catalog):
    table = _table(catalog)
    checksum = table_checksum(table)

    out = _merge(settings, table, by_name, hooks=Hooks(after_write=_swap_field_ids))

    assert (out["state"], out["reason"]) == ("failed", "verification_failed"), out
    assert "differs from its inputs" in out["error"]
    assert table_checksum(table) == checksum
    assert not action_outputs(table)
