"""The pyarrow rewrite of one group, run as a Spark task: how the data work reaches object stores.

Spark's own Parquet reader and writer go through Hadoop filesystems, and no registry this project can
use serves ``hadoop-aws``; so on a table that is not on ``file://`` Spark cannot open the files. The
pyarrow path (:func:`spark_actors.arrow_rewrite.rewrite_group_arrow`) can: it reads and writes
through the table's FileIO, with the catalog's endpoint, keys and region. Here that path runs inside
a Spark task (``mapInArrow`` over a one-row DataFrame): the Spark Connect server's Python worker
rebuilds the table from its metadata file with the same FileIO properties, rewrites the group,
verifies it (rows and the one content digest in and out) and sends back the outcome. Spark schedules
the groups of an action over its cores as it does any job, and the worker process of the service
moves no data.

Requirements on the Spark side: its Python workers import ``pyiceberg`` and ``autooptimize`` (the
local server started by the service runs them with the service's own interpreter; a remote cluster
needs ``pip install autooptimize`` on its nodes).
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.fileio import io_properties
from spark_actors.arrow_rewrite import ArrowOutput

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _encode(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def _decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text.encode("ascii")))  # noqa: S301 - our own task's result


def _job(metadata_location: str, properties: dict[str, str], job: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """Runs in the Spark worker: ``job(table, *args)`` on the table rebuilt from its metadata file, its
    outcome (or the error) pickled as text."""
    from pyiceberg.table import StaticTable

    try:
        table = StaticTable.from_metadata(metadata_location, properties=properties)
        return _encode(("ok", job(table, *args)))
    except Exception as exc:  # sent back whole: the action maps it as if it ran here
        return _encode(("error", exc))


def run_on_spark(spark: SparkSession, table: Table, job: Callable[..., Any], *args: Any) -> Any:
    """``job(table, *args)`` run as one Spark task (``job`` a module-level function the Spark worker
    imports); its result returned, its exception raised here."""
    import pyarrow as pa

    packed = (table.metadata_location, io_properties(table.io), job, args)

    def run(batches: Any) -> Any:
        for batch in batches:
            for _ in range(batch.num_rows):
                yield pa.RecordBatch.from_pylist([{"outcome": _job(*packed)}])

    rows = spark.createDataFrame([(0,)], "job int").mapInArrow(run, "outcome string").collect()
    if len(rows) != 1:
        raise VerificationFailed(f"the Spark task of {getattr(job, '__name__', job)} returned {len(rows)} outcomes, "
                                 "not one")
    status, value = _decode(rows[0]["outcome"])
    if status == "error":
        raise value
    return value


def _rewrite_group(table: Table, inputs: list[DataFile], output_dir: str, files_out: int, codec: str,
                   spec_id: int | None, input_partition: tuple[int, Record] | None,
                   sort: list[Any] | None, zorder: list[Any] | None) -> ArrowOutput:
    from spark_actors.arrow_rewrite import rewrite_group_arrow

    spec = table.metadata.specs()[spec_id] if spec_id is not None else None
    return rewrite_group_arrow(table, inputs, output_dir, files_out, codec, spec=spec,
                               input_partition=input_partition, sort=sort, zorder=zorder)


def rewrite_group_arrow_on_spark(
    spark: SparkSession,
    table: Table,
    inputs: list[DataFile],
    output_dir: str,
    files_out: int,
    codec: str = "zstd",
    spec: PartitionSpec | None = None,
    input_partition: tuple[int, Record] | None = None,
    sort: list[Any] | None = None,
    zorder: list[Any] | None = None,
) -> ArrowOutput:
    """:func:`~spark_actors.arrow_rewrite.rewrite_group_arrow` of one group, run as one Spark task."""
    out: ArrowOutput = run_on_spark(spark, table, _rewrite_group, list(inputs), output_dir, files_out, codec,
                                    spec.spec_id if spec is not None else None, input_partition, sort, zorder)
    return out
