"""The delete-compaction job: read data files by field id, drop the rows their position and equality
deletes remove, write target-size Parquet files, and measure the rows read and kept in the same pass
(the caller reads the outputs back with another reader).

Position deletes are applied by an anti-join on (data file, ``_metadata.row_index``) and only when the
delete file's data sequence number is >= the data file's; equality deletes by a null-safe anti-join on
their columns (read by field id) and only when the delete file's data sequence number is strictly
greater than the data file's (Iceberg spec, "Scan Planning"). Spark reports ``file:/x`` where Iceberg
stores ``file:///x``: both sides are normalised the same way before joining, and every data row must
find its file in the mapping (counted), so a path that failed to normalise can never silently keep a
deleted row.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from pyiceberg.schema import Schema

from autooptimize.engines.deletes import (
    LOCAL_SCHEME,
    CompactionOutput,
    SequencedFile,
    equality_fields,
    join_key,
)
from autooptimize.engines.digest import spark_digest, spark_digest_columns
from autooptimize.iceberg.deletes import POS_FILE_PATH_ID, POS_POS_ID
from spark_actors.rewrite import list_parquet
from spark_actors.schema import FIELD_ID_KEY, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def _key(col: Column) -> Column:
    from pyspark.sql import functions as F

    return F.regexp_replace(col, LOCAL_SCHEME, "/")


def _position_deletes(spark: SparkSession, files: DataFrame, deletes: list[SequencedFile]) -> DataFrame:
    """Distinct (file key, row position) pairs that apply to the data files of ``files``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as st

    schema = st.StructType([
        st.StructField("file_path", st.StringType(), True, {FIELD_ID_KEY: POS_FILE_PATH_ID}),
        st.StructField("pos", st.LongType(), True, {FIELD_ID_KEY: POS_POS_ID}),
    ])
    seqs = spark.createDataFrame([(join_key(d.path), d.sequence_number) for d in deletes],
                                 "_ao_dkey string, _ao_dseq long")
    raw = spark.read.schema(schema).parquet(*[d.path for d in deletes])
    return (
        raw.select(_key(F.col("file_path")).alias("_ao_key"), F.col("pos").alias("_ao_pos"),
                   _key(F.col("_metadata.file_path")).alias("_ao_dkey"))
        .join(F.broadcast(seqs), "_ao_dkey")
        .join(F.broadcast(files), "_ao_key")
        .where(F.col("_ao_dseq") >= F.col("_ao_seq"))
        .select("_ao_fid", "_ao_pos")
        .distinct()
    )


def _equality_deletes(spark: SparkSession, schema: Schema, ids: tuple[int, ...],
                      deletes: list[SequencedFile]) -> tuple[DataFrame, list[str]]:
    from pyspark.sql import functions as F

    fields = equality_fields(schema, ids)
    seqs = spark.createDataFrame([(join_key(d.path), d.sequence_number) for d in deletes],
                                 "_ao_dkey string, _ao_dseq long")
    raw = spark.read.schema(spark_schema(Schema(*fields))).parquet(*[d.path for d in deletes])
    names = [f"_ao_e{f.field_id}" for f in fields]
    frame = (
        raw.select(*[F.col(f"`{f.name}`").alias(n) for f, n in zip(fields, names, strict=True)],
                   _key(F.col("_metadata.file_path")).alias("_ao_dkey"))
        .join(F.broadcast(seqs), "_ao_dkey")
        .drop("_ao_dkey")
    )
    return frame, [f.name for f in fields]


def compact_group_sql(
    spark: SparkSession,
    schema: Schema,
    data_files: list[SequencedFile],
    deletes: list[SequencedFile],
    output_dir: str,
    files_out: int,
    codec: str = "zstd",
    broadcast_deletes: bool = False,
) -> CompactionOutput:
    """Rewrite ``data_files`` with ``deletes`` applied into ``files_out`` files under ``output_dir``.

    ``deletes`` are the delete files that may apply to these data files (the caller scopes them to the
    partition); the sequence-number rules above decide, per data file, which ones do.
    ``broadcast_deletes`` ships the delete rows to every task instead of shuffling the data: for
    delete files small enough to hold in memory (the caller knows their row counts).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    # rows carry a small file number, not the path, so the delete side of the joins stays small
    files = spark.createDataFrame([(join_key(f.path), f.sequence_number, i) for i, f in enumerate(data_files)],
                                  "_ao_key string, _ao_seq long, _ao_fid int")
    data = spark.read.schema(spark_schema(schema)).parquet(*[f.path for f in data_files])
    columns = list(data.columns)
    data = data.select("*", _key(F.col("_metadata.file_path")).alias("_ao_key"),
                       F.col("_metadata.row_index").alias("_ao_pos")).join(F.broadcast(files), "_ao_key") \
        .drop("_ao_key")
    read = Observation("ao_rows_read")
    data = data.observe(read, F.count(F.lit(1)).alias("rows"))

    positional = [d for d in deletes if d.equality_ids is None]
    if positional:
        pairs = _position_deletes(spark, files, positional)
        data = data.join(F.broadcast(pairs) if broadcast_deletes else pairs, ["_ao_fid", "_ao_pos"], "left_anti")
    by_ids: dict[tuple[int, ...], list[SequencedFile]] = {}
    for d in deletes:
        if d.equality_ids is not None:
            by_ids.setdefault(tuple(d.equality_ids), []).append(d)
    for ids, group in sorted(by_ids.items()):
        frame, names = _equality_deletes(spark, schema, ids, group)
        left, right = data.alias("d"), (F.broadcast(frame) if broadcast_deletes else frame).alias("e")
        condition = reduce(
            lambda a, b: a & b,
            [F.col(f"d.`{name}`").eqNullSafe(F.col(f"e._ao_e{schema.find_field(name).field_id}")) for name in names],
        ) & (F.col("d._ao_seq") < F.col("e._ao_dseq"))
        data = left.join(right, condition, "left_anti")

    kept = data.select(*[F.col(f"`{c}`") for c in columns])
    kept_observation = Observation("ao_kept_digest")
    kept = kept.observe(kept_observation, *spark_digest_columns(kept))
    shaped = kept.coalesce(1) if files_out <= 1 else kept.repartition(files_out)
    shaped.write.mode("error").option("compression", codec).parquet(output_dir)

    digest_kept = spark_digest(kept_observation.get)
    paths = list_parquet(output_dir)
    return CompactionOutput(
        paths=tuple(paths),
        rows_read=int(read.get["rows"] or 0),
        digest_kept=digest_kept,
    )
