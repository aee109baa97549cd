"""Consolidation of buffered files on the pyarrow path: the same job as spark_actors/consolidate.py,
writing through the table's FileIO, so a table on an object store can take buffered writes.

The buffered files are on the worker's own disk (the buffer zone), so this runs in the worker process:
each file is read by name with pyarrow and cast to the table's schema exactly as landing checked it
(services/buffer/landing.check_file: a column the file lacks is null), the rows are split by the
table's partition spec with pyiceberg's own transforms, and each partition is written to files of at
most ``rows_per_file`` rows with Iceberg field ids. The rows and content digest of the cast input are
measured in the same pass; the caller reads the outputs back with another reader and compares.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.arrow.writers import Writers, is_empty_dir, write_rolling
from autooptimize.engines.consolidation import ConsolidateOutput, PartitionOutput
from autooptimize.engines.digest import DigestAccumulator
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.internals import split_by_partition


def cast_file(path: str, expected: pa.Schema) -> pa.Table:
    """A buffered file read by name and cast to ``expected`` (the table's schema without field ids)."""
    data = pq.read_table(path)
    columns = [data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
               for f in expected]
    return pa.table(columns, schema=pa.schema([f.with_nullable(True) for f in expected]))


def _required_nulls(data: pa.Table, required: list[str]) -> int:
    if not required or not data.num_rows:
        return 0
    any_null = pc.is_null(data.column(required[0]))
    for name in required[1:]:
        any_null = pc.or_(any_null, pc.is_null(data.column(name)))
    return int(pc.sum(any_null.cast(pa.int64())).as_py() or 0)


def _values(record: Record) -> tuple[Any, ...]:
    return tuple(record[i] for i in range(len(record)))


def _directory(output_dir: str, path: str, record: Record, claimed: dict[str, tuple[Any, ...]]) -> str:
    """The partition's directory under ``output_dir``. Iceberg's partition path can stand for two
    partitions (a null and the string "null" are both ``v=null``), and files are assigned to their partition
    by directory: a partition whose path another one holds gets a ``key-<hash of its values>`` level."""
    directory, values = f"{output_dir}/{path}", _values(record)
    if claimed.setdefault(directory, values) != values:
        directory = f"{directory}/key-{hashlib.sha256(repr(values).encode()).hexdigest()[:12]}"
        claimed[directory] = values
    return directory


def consolidate_files_arrow(table: Table, spec: PartitionSpec, groups: list[list[str]], output_dir: str,
                            rows_per_file: int, codec: str = "zstd") -> ConsolidateOutput:
    """Write ``groups`` (lists of buffered files) under ``output_dir`` (which must not exist), one
    directory per partition of ``spec`` and at most ``rows_per_file`` rows per file. Nothing is written
    when a required column holds a null (``required_nulls`` says how many rows)."""
    schema = table.schema()
    if not is_empty_dir(table, output_dir):
        raise VerificationFailed(f"output directory {output_dir} already exists")
    expected = schema_to_pyarrow(schema, include_field_ids=False)
    required = [f.name for f in schema.fields if f.required]
    paths = [p.removeprefix("file://") for group in groups for p in group]
    tables = [cast_file(p, expected) for p in paths]
    nulls = sum(_required_nulls(t, required) for t in tables)
    digest_in = DigestAccumulator()
    if nulls:
        return ConsolidateOutput(partitions=(), digest_in=digest_in.digest, required_nulls=nulls)
    data = pa.concat_tables(tables) if tables else expected.empty_table()
    del tables
    writers = Writers(table, schema_to_pyarrow(schema, include_field_ids=True), codec)
    by_dir: dict[str, tuple[tuple[Any, ...], list[str]]] = {}
    with writers:  # a failure closes the open files and is raised as it was
        parts = split_by_partition(spec, schema, data) if spec.fields else None
        claimed: dict[str, tuple[Any, ...]] = {}
        pieces = ([(_directory(output_dir, p.partition_key.to_path(), p.partition_key.partition, claimed),
                    p.partition_key.partition, p.arrow_table_partition)
                   for p in parts] if parts is not None else [(output_dir, Record(), data)])
        for directory, record, piece in pieces:
            for batch in piece.to_batches():
                if batch.num_rows:
                    digest_in.add(batch)
                    write_rolling(writers, directory, batch, rows_per_file, (spec.spec_id, record))
            writers.roll(directory)
            by_dir[directory] = (_values(record), [])
    written = writers.close()
    for w in written:
        directory = w.path.rsplit("/", 1)[0]
        by_dir[directory][1].append(w.path)
    partitions = tuple(PartitionOutput(values, tuple(p)) for values, p in
                       sorted(by_dir.values(), key=lambda item: str(item[0])) if p)
    return ConsolidateOutput(partitions=partitions, digest_in=digest_in.digest, required_nulls=0)
