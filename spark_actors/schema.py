"""Iceberg schema → Spark StructType whose fields carry ``parquet.field.id`` metadata, so Spark
reads columns by field id (a renamed column keeps its values) and writes the ids back."""

from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from autooptimize.errors import ActionRefused

FIELD_ID_KEY = "parquet.field.id"


def _spark_type(field: NestedField, t: IcebergType) -> Any:
    from pyspark.sql import types as st

    if isinstance(t, BooleanType):
        return st.BooleanType()
    if isinstance(t, IntegerType):
        return st.IntegerType()
    if isinstance(t, LongType):
        return st.LongType()
    if isinstance(t, FloatType):
        return st.FloatType()
    if isinstance(t, DoubleType):
        return st.DoubleType()
    if isinstance(t, DecimalType):
        return st.DecimalType(t.precision, t.scale)
    if isinstance(t, DateType):
        return st.DateType()
    if isinstance(t, TimestamptzType):
        return st.TimestampType()
    if isinstance(t, TimestampType):
        return st.TimestampNTZType()
    if isinstance(t, TimeType):
        # Parquet INT64 TIME(micros, not adjusted to UTC) both ways, with spark.sql.timeType.enabled
        return st.TimeType(6)
    if isinstance(t, StringType):
        return st.StringType()
    if isinstance(t, BinaryType):
        return st.BinaryType()
    if isinstance(t, StructType):
        return st.StructType([_spark_field(f) for f in t.fields])
    # list/map (element/key/value ids are not written), fixed and uuid (written as BINARY) go through
    # autooptimize.arrow.rewrite; see autooptimize.engines.types. Anything else is refused.
    raise ActionRefused(
        "unsupported_type",
        f"column {field.name!r} has type {t}, which the rewrite does not support yet",
    )


def _spark_field(field: NestedField) -> Any:
    from pyspark.sql import types as st

    return st.StructField(
        field.name, _spark_type(field, field.field_type), nullable=True, metadata={FIELD_ID_KEY: field.field_id}
    )


def spark_schema(schema: Schema) -> Any:
    """The Spark read/write schema of an Iceberg schema, by field id."""
    from pyspark.sql import types as st

    return st.StructType([_spark_field(f) for f in schema.fields])
