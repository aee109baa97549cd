"""Which files the pyarrow path reads directly (autooptimize.arrow.rewrite.scan): only those whose top-level
columns are the table's own by name, field id and type; everything else goes through pyiceberg's ArrowScan,
which maps columns by field id (renames, promotions, added or dropped columns, nested types)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autooptimize.arrow.rewrite import _same_columns


def _field(name: str, type_: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


TABLE = pa.schema([_field("id", pa.int64(), 1, nullable=False), _field("name", pa.large_string(), 2),
                   _field("blob", pa.large_binary(), 3)])


def test_the_table_own_columns_and_narrow_strings_are_read_directly() -> None:
    assert _same_columns(TABLE, TABLE)
    narrow = pa.schema([_field("id", pa.int64(), 1), _field("name", pa.string(), 2), _field("blob", pa.binary(), 3)])
    assert _same_columns(narrow, TABLE)  # pyiceberg writes string; nullability is checked by the cast


@pytest.mark.parametrize("found", [
    pa.schema([_field("id", pa.int64(), 1), _field("title", pa.large_string(), 2), _field("blob", pa.binary(), 3)]),
    pa.schema([_field("id", pa.int32(), 1), _field("name", pa.large_string(), 2), _field("blob", pa.binary(), 3)]),
    pa.schema([_field("id", pa.int64(), 1), _field("name", pa.large_string(), 9), _field("blob", pa.binary(), 3)]),
    pa.schema([_field("id", pa.int64(), 1), _field("name", pa.large_string(), 2)]),
    pa.schema([_field("name", pa.large_string(), 2), _field("id", pa.int64(), 1), _field("blob", pa.binary(), 3)]),
    pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.large_string()), pa.field("blob", pa.binary())]),
], ids=["renamed", "promoted", "other-field-id", "column-missing", "reordered", "no-field-ids"])
def test_any_other_file_goes_through_arrow_scan(found: pa.Schema) -> None:
    assert not _same_columns(found, TABLE)


def test_a_nested_column_always_goes_through_arrow_scan() -> None:
    nested = pa.schema([_field("id", pa.int64(), 1), _field("tags", pa.list_(pa.string()), 2)])
    assert not _same_columns(nested, nested)
