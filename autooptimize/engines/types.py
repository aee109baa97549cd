"""Which engine rewrites a group, and a check that an output file has the table's physical types.

Measured on pyspark 4.3 over Spark Connect (see the autooptimize.arrow.rewrite module doc for the figures):

* Spark round-trips boolean, int, long, float, double, decimal, date, time (with
  ``spark.sql.timeType.enabled``), timestamp, timestamptz, string, binary, and structs of those,
  writing the field id of every struct field.
* Spark cannot round-trip uuid (it refuses to read FIXED_LEN_BYTE_ARRAY(16) UUID unless told it is
  binary, then writes BINARY), fixed[L] (written as BINARY), list and map (the element, key and
  value ids are not written, so pyiceberg cannot read the output without a name mapping).
  Those schemas, and files that carry no field ids, are rewritten by pyiceberg's own reader and a
  pyarrow writer (:mod:`autooptimize.arrow.rewrite`).
* Anything neither path knows (nanosecond timestamps, unknown, variant, geometry) is refused.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
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

SPARK = "spark"
ARROW = "arrow"

_SPARK_PRIMITIVES = (BooleanType, IntegerType, LongType, FloatType, DoubleType, DecimalType, DateType, TimeType,
                     TimestampType, TimestamptzType, StringType, BinaryType)
_ARROW_ONLY = (UUIDType, FixedType)


def _fields(t: IcebergType, name: str) -> list[tuple[str, IcebergType]]:
    """Every (dotted name, type) below and including ``t``."""
    out = [(name, t)]
    if isinstance(t, StructType):
        for f in t.fields:
            out += _fields(f.field_type, f"{name}.{f.name}" if name else f.name)
    elif isinstance(t, ListType):
        out += _fields(t.element_type, f"{name}.element")
    elif isinstance(t, MapType):
        out += _fields(t.key_type, f"{name}.key") + _fields(t.value_type, f"{name}.value")
    return out


def unsupported_reason(schema: Schema) -> str | None:
    """Why no rewrite path can write this schema faithfully, or None."""
    for name, t in _fields(schema.as_struct(), ""):
        if isinstance(t, (StructType, ListType, MapType, *_SPARK_PRIMITIVES, *_ARROW_ONLY)):
            continue
        return f"column {name!r} has type {t}, which no rewrite path writes faithfully"
    return None


def engine_for(schema: Schema, field_ids: bool = True) -> str:
    """``spark`` unless the schema holds a type Spark cannot round-trip or the inputs have no field ids."""
    if not field_ids:
        return ARROW
    for _, t in _fields(schema.as_struct(), ""):
        if isinstance(t, (ListType, MapType, *_ARROW_ONLY)):
            return ARROW
    return SPARK


def _optional(t: IcebergType) -> IcebergType:
    if isinstance(t, StructType):
        return StructType(*[NestedField(f.field_id, f.name, _optional(f.field_type), required=False) for f in t.fields])
    if isinstance(t, ListType):
        return ListType(t.element_id, _optional(t.element_type), element_required=False)
    if isinstance(t, MapType):
        return MapType(t.key_id, _optional(t.key_type), t.value_id, _optional(t.value_type), value_required=False)
    return t


def output_schema_problem(schema: Schema, path: str, io: Any) -> str | None:
    """Why the Parquet file at ``path`` does not hold ``schema``'s columns, ids and types, or None.

    Optionality is ignored (Spark writes every column optional; the table's schema keeps it).
    """
    with io.new_input(path).open() as stream:
        arrow_schema = pq.read_schema(stream)
    try:
        written = pyarrow_to_schema(arrow_schema)
    except ValueError as exc:
        return f"output {path} cannot be read by field id: {exc}"
    want, got = _optional(schema.as_struct()), _optional(written.as_struct())
    if want != got:
        return f"output {path} has schema {got}, expected {want}"
    return None
