"""The pyarrow rewrite path: pyiceberg's own reader in, a pyarrow writer with field ids out.

Every group of the default engine runs it, as a task on a Spark executor (spark_actors/group_tasks.py);
the ``local`` engine runs it in the worker. It rewrites faithfully what Spark's own Parquet IO (the
``spark_sql`` engine) cannot (measured on pyspark 4.3, Spark Connect):

* uuid: Spark fails to read ``FIXED_LEN_BYTE_ARRAY(16) (UUID)`` ("Illegal Parquet type"); read as
  binary it writes ``BINARY``, which is not Iceberg's uuid.
* fixed[L]: written as ``BINARY`` instead of ``FIXED_LEN_BYTE_ARRAY(L)``.
* list and map: Spark writes the list's field id but ``field_id=-1`` on the element, key and value,
  and pyiceberg then refuses the file ("Parquet file does not have field-ids ...").
* files without field ids (``add_files`` under a name mapping): pyiceberg's reader applies the
  table's name mapping exactly (aliases, nested fields), so these are read by name here, in their
  own group, and written back with field ids.
* rewriting older-spec files into the current spec: the partition of every row is computed by
  pyiceberg's transforms (the same code pyiceberg's writer uses; bucket is Iceberg's murmur3 from
  pyiceberg-core, which Spark's ``hash`` is not).

Reading goes through ``ArrowScan`` (projection by field id or name mapping, type promotion, NULL for
added columns, dropped columns left out); batches stream to rolling writers, so memory holds a batch,
not the group. Verification is the same as on the Spark path: rows and an order-independent content
checksum of the inputs (observed while writing) must equal those of the outputs, read back by the
caller with another reader (plain pyarrow by field id), and each output must hold the table's schema
with its field ids and physical types.
The checksum is the one content digest of autooptimize/engines/digest.py (the same definition as
the Spark path's, computed with pyarrow and numpy).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import FileScanTask, Table
from pyiceberg.typedef import Record

from autooptimize.arrow.sort import SortKey, sorted_slices
from autooptimize.arrow.writers import Writers, is_empty_dir, write, write_rolling
from autooptimize.arrow.zorder import zorder_slices
from autooptimize.domain.cancel import raise_if_stopped
from autooptimize.engines.digest import DigestAccumulator
from autooptimize.engines.types import output_schema_problem, unsupported_reason
from autooptimize.errors import ActionRefused, VerificationFailed
from autooptimize.iceberg.internals import split_by_partition


@dataclass(frozen=True)
class ArrowOutput:
    """Output files with the (spec id, partition record) each belongs to."""

    paths: tuple[str, ...]
    partitions: tuple[tuple[int, Record], ...]
    rows_in: int
    checksum_in: str


#: Files read ahead, in threads, while the caller consumes the current one (bounded in bytes as well).
READ_AHEAD_FILES = 8
READ_AHEAD_BYTES = 256 << 20


def scan(table: Table, files: list[DataFile]) -> Iterator[pa.RecordBatch]:
    """The rows of ``files``, file after file, as pyiceberg reads them in the table's current schema
    (see :func:`scan_files`)."""
    for _, batches in scan_files(table, files):
        yield from batches


def scan_files(table: Table, files: list[DataFile]) -> Iterator[tuple[DataFile, list[pa.RecordBatch]]]:
    """Each of ``files`` in order with its rows, every row in file order, as pyiceberg reads them in the
    table's current schema.

    A file whose top-level columns are exactly the table's (names, field ids and types: every file this
    service or pyiceberg wrote since the last schema change) is read directly with pyarrow, which spares
    pyiceberg's per-file projection (``benchmarks.merge``: 125 files of 23 MB in 0.15 s instead of
    0.32 s). Any other file (an older schema, nested columns, a file without field ids) goes through
    pyiceberg's ``ArrowScan``, which maps it by field id. Up to :data:`READ_AHEAD_FILES` files (and
    :data:`READ_AHEAD_BYTES`) are read ahead in threads, as ArrowScan reads its tasks concurrently."""
    expected = schema_to_pyarrow(table.schema(), include_field_ids=True)
    plain = pa.schema([f.remove_metadata() for f in expected])

    def read(data_file: DataFile) -> list[pa.RecordBatch] | None:
        with table.io.new_input(data_file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream)
            if not _same_columns(parquet.schema_arrow, expected):
                return None
            # the table's types, no field metadata (as ArrowScan gives); a null in a required column fails
            # here rather than being written on. One thread per file: files are read ahead in threads, and
            # pyarrow's own threads on the columns of a small file cost more than they saved (13% more
            # CPU on the files of benchmarks.merge)
            return [batch for group in range(parquet.num_row_groups)
                    for batch in parquet.read_row_group(group, use_threads=False).cast(plain).to_batches()]

    arrow_scan: ArrowScan | None = None
    remaining = iter(files)
    ahead: deque[tuple[DataFile, Future[list[pa.RecordBatch] | None]]] = deque()
    ahead_bytes = 0
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ao-read") as pool:
        while True:
            while len(ahead) < READ_AHEAD_FILES and (not ahead or ahead_bytes < READ_AHEAD_BYTES):
                data_file = next(remaining, None)
                if data_file is None:
                    break
                ahead.append((data_file, pool.submit(read, data_file)))
                ahead_bytes += int(data_file.file_size_in_bytes)
            if not ahead:
                return
            data_file, future = ahead.popleft()
            ahead_bytes -= int(data_file.file_size_in_bytes)
            batches = future.result()
            if batches is None:
                if arrow_scan is None:
                    arrow_scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue(),
                                           case_sensitive=True)
                batches = list(arrow_scan.to_record_batches([FileScanTask(data_file)]))
            yield data_file, batches


_WIDE = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}


def _same_columns(found: pa.Schema, expected: pa.Schema) -> bool:
    """True when ``found`` has ``expected``'s top-level columns in order (names, field ids and types, where
    ``string``/``binary`` stand for the ``large_`` types); a nested column always goes to ArrowScan."""
    if len(found) != len(expected):
        return False
    for have, want in zip(found, expected, strict=True):
        if pa.types.is_nested(want.type) or have.name != want.name:
            return False
        if (have.metadata or {}).get(b"PARQUET:field_id") != (want.metadata or {}).get(b"PARQUET:field_id"):
            return False
        if have.type != want.type and _WIDE.get(have.type) != want.type:
            return False
    return True


def check_writable(table: Table, output_dir: str) -> Any:
    """The table's schema, once the pyarrow path can write its types and ``output_dir`` does not exist yet
    (ActionRefused, VerificationFailed)."""
    schema = table.schema()
    reason = unsupported_reason(schema)
    if reason is not None:
        raise ActionRefused("unsupported_type", reason)
    if not is_empty_dir(table, output_dir):
        raise VerificationFailed(f"output directory {output_dir} already exists")
    return schema


def rewrite_group_arrow(
    table: Table,
    inputs: list[DataFile],
    output_dir: str,
    files_out: int,
    codec: str = "zstd",
    spec: PartitionSpec | None = None,
    input_partition: tuple[int, Record] | None = None,
    sort: list[SortKey] | None = None,
    zorder: list[Any] | None = None,
) -> ArrowOutput:
    """Rewrite ``inputs`` under ``output_dir`` (which must not exist) and verify the result.

    Without ``spec`` the rows keep the inputs' partition (``input_partition``) and are spread over
    about ``files_out`` files. With ``spec`` every row goes to its partition under ``spec`` (one
    sub-directory and one file per partition met), and each output records that partition. With
    ``sort`` (no ``spec``) the group is sorted in memory and cut into files of disjoint ranges of the
    first key (autooptimize/arrow/sort.py). With ``zorder`` (ZKeys; no ``spec``) it is ordered by the
    z-value and cut into files of disjoint z ranges (autooptimize/arrow/zorder.py).
    """
    schema = check_writable(table, output_dir)
    if spec is None and input_partition is None:
        raise ValueError("rewrite_group_arrow needs the inputs' partition or a spec to partition by")
    if (sort or zorder) and spec is not None:
        raise ValueError("rewrite_group_arrow sorts within one partition: give sort or spec, not both")
    ordered = bool(sort or zorder)
    arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
    expected_rows = sum(int(f.record_count) for f in inputs)
    rows_per_file = max(1, math.ceil(expected_rows / max(1, files_out)))
    writers = Writers(table, arrow_schema, codec)
    digest_in = DigestAccumulator()
    held: list[pa.Table] = []  # a sort needs the whole group
    with writers:  # a failure closes the open files and is raised as it was
        for batch in scan(table, inputs):
            raise_if_stopped(output_dir)  # an attempt stopped from outside ends here (domain/cancel.py)
            digest_in.add(batch)
            if ordered:
                held.append(pa.Table.from_batches([batch]))
            elif spec is None:
                assert input_partition is not None
                write_rolling(writers, output_dir, batch, rows_per_file, input_partition)
            else:
                for part in split_by_partition(spec, schema, pa.Table.from_batches([batch])):
                    directory = f"{output_dir}/{part.partition_key.to_path()}" if spec.fields else output_dir
                    partition = (spec.spec_id, part.partition_key.partition)
                    for chunk in part.arrow_table_partition.to_batches():
                        write(writers.get(directory, partition), schema, chunk)
        if ordered:
            assert input_partition is not None
            data = pa.concat_tables(held, promote_options="permissive") if held else arrow_schema.empty_table()
            held.clear()
            pieces = zorder_slices(data, zorder, files_out) if zorder else sorted_slices(data, sort or [], files_out)
            for piece in pieces:
                for chunk in piece.to_batches():
                    write(writers.get(output_dir, input_partition), schema, chunk)
                writers.roll(output_dir)
    written = writers.close()
    paths = [w.path for w in written]
    check_outputs(table, paths)
    return ArrowOutput(
        paths=tuple(paths),
        partitions=tuple(w.partition for w in written),
        rows_in=digest_in.rows, checksum_in=digest_in.digest.checksum,
    )


def check_outputs(table: Table, paths: list[str], schema: Any = None) -> None:
    """VerificationFailed unless every output holds the table's schema (or ``schema``) with its field ids
    and types."""
    for path in paths:
        problem = output_schema_problem(schema or table.schema(), path, table.io)
        if problem is not None:
            raise VerificationFailed(problem)
