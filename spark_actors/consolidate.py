"""The consolidation job: read buffered files by name, cast them to the table's schema, write
target-size files per partition of the table's spec, and measure rows and a content checksum of the
cast input (the caller reads the written output back with another reader)."""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from autooptimize.engines.consolidation import ConsolidateOutput, PartitionOutput
from autooptimize.engines.digest import spark_digest, spark_digest_columns
from autooptimize.errors import InvalidArgument
from spark_actors.rewrite import list_parquet
from spark_actors.schema import FIELD_ID_KEY, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
PART_COL = "aop{}"
# Spark writes both null and "" as HIVE_NULL directories; every string partition value is written
# behind this marker, so "" reaches the directory as "v" and only a null becomes HIVE_NULL
STRING_MARK = "v"


def check_supported_spec(spec: PartitionSpec, schema: Schema) -> None:
    """Raise InvalidArgument when a partition transform cannot be computed by the consolidation job."""
    for pfield in spec.fields:
        _partition_expr(pfield, schema, None)


def _partition_expr(pfield: Any, schema: Schema, col: Column | None) -> Any:
    from pyspark.sql import functions as F

    source = schema.find_field(pfield.source_id)
    t, tr = source.field_type, pfield.transform
    c = col
    temporal = isinstance(t, DateType | TimestampType | TimestamptzType)
    supported = (
        isinstance(tr, IdentityTransform) and isinstance(
            t, BooleanType | IntegerType | LongType | StringType | DateType | TimestampType | TimestamptzType
            | DecimalType)
        or isinstance(tr, YearTransform | MonthTransform | DayTransform) and temporal
        or isinstance(tr, HourTransform) and isinstance(t, TimestampType | TimestamptzType)
        or isinstance(tr, TruncateTransform) and isinstance(t, IntegerType | LongType | StringType)
    )
    if not supported:
        raise InvalidArgument(
            f"partition field {pfield.name!r} ({tr} of {t}) is not supported by buffered writes; supported: "
            "identity, year, month, day, hour, and truncate of int, long or string"
        )
    if c is None:
        return None
    if isinstance(tr.result_type(t), StringType):
        return F.concat(F.lit(STRING_MARK), _transformed(tr, t, c))
    return _transformed(tr, t, c)


def _transformed(tr: Any, t: Any, c: Column) -> Any:
    from pyspark.sql import functions as F

    ts = c.cast("timestamp") if isinstance(t, TimestampType) else c
    if isinstance(tr, IdentityTransform):
        if isinstance(t, DateType):
            return F.unix_date(c)
        if isinstance(t, TimestampType | TimestamptzType):
            return F.unix_micros(ts)
        return c
    if isinstance(tr, YearTransform):
        return F.year(c) - F.lit(1970)
    if isinstance(tr, MonthTransform):
        return (F.year(c) - F.lit(1970)) * F.lit(12) + F.month(c) - F.lit(1)
    if isinstance(tr, DayTransform):
        return F.unix_date(F.to_date(ts) if not isinstance(t, DateType) else c)
    if isinstance(tr, HourTransform):
        return F.floor(F.unix_micros(ts) / F.lit(3_600_000_000)).cast("int")
    width = tr.width  # truncate
    if isinstance(t, StringType):
        return F.substring(c, 1, width)
    return c - F.pmod(c, F.lit(width))


def _parse_value(text: str, pfield: Any, schema: Schema) -> Any:
    """A partition directory value written by Spark, back to Iceberg's internal representation."""
    if text == HIVE_NULL:
        return None
    text = unquote(text)
    source_type = schema.find_field(pfield.source_id).field_type
    result = pfield.transform.result_type(source_type)
    if isinstance(result, StringType):
        if not text.startswith(STRING_MARK):
            raise InvalidArgument(f"partition directory value {text!r} lacks its marker {STRING_MARK!r}")
        return text[len(STRING_MARK):]
    if isinstance(result, BooleanType):
        return text == "true"
    if isinstance(result, DecimalType):
        return Decimal(text)
    if isinstance(result, FloatType | DoubleType):
        return float(text)
    return int(text)


def cast_frame(spark: SparkSession, schema: Schema, groups: list[list[str]]) -> DataFrame:
    """Every group of same-schema files read by name and cast to the table's schema (with field ids);
    a column the files lack is null."""
    from pyspark.sql import functions as F

    target = spark_schema(schema)
    frames = []
    for paths in groups:
        df = spark.read.option("mergeSchema", "false").parquet(*paths)
        present = set(df.columns)
        cols = [
            (F.col(f"`{f.name}`").cast(f.dataType) if f.name in present else F.lit(None).cast(f.dataType))
            .alias(f.name, metadata={FIELD_ID_KEY: f.metadata[FIELD_ID_KEY]})
            for f in target.fields
        ]
        frames.append(df.select(*cols))
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def consolidate_files(
    spark: SparkSession,
    schema: Schema,
    spec: PartitionSpec,
    groups: list[list[str]],
    output_dir: str,
    rows_per_file: int,
    codec: str = "zstd",
) -> ConsolidateOutput:
    """Write ``groups`` (lists of same-schema files) under ``output_dir`` (which must not exist), one
    directory per partition and at most ``rows_per_file`` rows per file."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    frame = cast_frame(spark, schema, groups)
    required = [f.name for f in schema.fields if f.required]
    observation = Observation("ao_buffer_digest")
    any_null = functools.reduce(lambda a, b: a | b, [F.col(f"`{n}`").isNull() for n in required], F.lit(False))
    null_check = [F.sum(F.when(any_null, 1).otherwise(0)).alias("required_nulls")]
    observed = frame.observe(observation, *spark_digest_columns(frame), *null_check)
    part_cols = [PART_COL.format(i) for i in range(len(spec.fields))]
    for name, pfield in zip(part_cols, spec.fields, strict=True):
        source = schema.find_field(pfield.source_id).name
        observed = observed.withColumn(name, _partition_expr(pfield, schema, F.col(f"`{source}`")))
    shaped = observed.repartition(*part_cols) if part_cols else observed.coalesce(1)
    writer = shaped.write.mode("error").option("compression", codec).option("maxRecordsPerFile", rows_per_file)
    if part_cols:
        writer = writer.partitionBy(*part_cols)
    writer.parquet(output_dir)
    measured = observation.get
    digest_in = spark_digest(measured)
    paths = list_parquet(output_dir)
    by_values: dict[tuple[Any, ...], list[str]] = {}
    prefix = output_dir.rstrip("/") + "/"
    for path in paths:
        parts = path[len(prefix):].split("/")[:-1]
        values = []
        for name, pfield, part in zip(part_cols, spec.fields, parts, strict=True):
            key, _, text = part.partition("=")
            if key != name:
                raise InvalidArgument(f"unexpected directory {part!r} in {output_dir}")
            values.append(_parse_value(text, pfield, schema))
        by_values.setdefault(tuple(values), []).append(path)
    return ConsolidateOutput(
        partitions=tuple(PartitionOutput(v, tuple(p)) for v, p in sorted(by_values.items(), key=lambda i: str(i[0]))),
        digest_in=digest_in,
        required_nulls=int(measured["required_nulls"] or 0),
    )
