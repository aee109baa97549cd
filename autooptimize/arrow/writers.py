"""The pyarrow path's Parquet writers: one output file (:class:`FileWriter`), the open files of a group by
directory (:class:`Writers`), rolling to a new file every ``rows_per_file`` rows (:func:`write_rolling`).

Every pyarrow rewrite writes through these (arrow/rewrite.py, arrow/deletes.py, arrow/consolidate.py):
files with the table's field ids and physical types, its Parquet writer properties, one row group per
row group's worth of batches, and a dictionary only for columns where one pays.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.iceberg.fileio import exists, list_files
from autooptimize.iceberg.internals import parquet_writer_kwargs, to_file_schema

log = logging.getLogger(__name__)

ROW_GROUP_ROWS = 1_048_576  # pyiceberg's write.parquet.row-group-limit default
ROW_GROUP_BYTES = 128 * 1024 * 1024  # in memory; Iceberg's write.parquet.row-group-size-bytes default


@dataclass
class FileWriter:
    """One output file. Batches (as read, of one Arrow schema) are held until a row group's worth has
    come, then converted and written at once: written one by one, the batches of small inputs made a
    row group each (125 row groups in a 25 MB file), and converting each cost more than the write."""

    path: str
    stream: Any
    arrow_schema: pa.Schema  # with field ids
    kwargs: dict[str, Any]  # the table's Parquet writer properties
    partition: tuple[int, Record]
    schema: Any  # the Iceberg schema written
    row_group_rows: int = ROW_GROUP_ROWS
    writer: pq.ParquetWriter | None = None  # opened at the first row group, when the data is known
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0
    bytes_per_row: float = 0.0  # of the first batch held, to bound what is held by bytes too

    def add(self, batch: pa.RecordBatch) -> None:
        if self.pending and not batch.schema.equals(self.pending[0].schema):
            self.flush()  # files of a group may read as string and as large_string: one schema per concat
        if not self.bytes_per_row:
            self.bytes_per_row = max(1.0, batch.nbytes / max(1, batch.num_rows))
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.rows += batch.num_rows
        if self.pending_rows >= self.row_group_rows or self.pending_rows * self.bytes_per_row >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            held = pa.Table.from_batches(self.pending).combine_chunks()
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.stream, schema=self.arrow_schema,
                                               use_dictionary=dictionary_columns(held), **self.kwargs)
            for batch in held.to_batches():
                # pyiceberg's own write-side conversion: field ids, required-ness and physical types
                converted = to_file_schema(self.schema, batch)
                self.writer.write_table(pa.Table.from_batches([converted.cast(self.arrow_schema)]),
                                        row_group_size=self.row_group_rows)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self.flush()
        if self.writer is None:  # no row came: still a valid (empty) Parquet file
            self.writer = pq.ParquetWriter(self.stream, schema=self.arrow_schema, **self.kwargs)
        self.writer.close()
        self.stream.close()

    def abandon(self) -> None:
        """Close the file after a failed write without writing what is held, each error of closing logged
        and dropped (:meth:`Writers.__exit__`)."""
        self.pending, self.pending_rows = [], 0
        for close in ([self.writer.close] if self.writer is not None else []) + [self.stream.close]:
            try:
                close()
            except Exception as exc:  # the stream already failed: the write's own error is the one raised
                log.debug("closing %s after a failed write: %s", self.path, exc)


#: A column whose first row group has more distinct values than this share of its rows is written
#: without a dictionary: pyarrow keeps a dictionary up to its page limit whatever it saves, and for
#: near-unique values (ids, payloads) that made files 3× larger than plain encoding (Spark's writer
#: falls back to plain when the dictionary does not pay).
DICTIONARY_MAX_DISTINCT_SHARE = 0.3
DICTIONARY_SAMPLE_ROWS = 16_384  # judged on this many rows of the first row group


def dictionary_columns(data: pa.Table) -> list[str] | bool:
    """The top-level columns worth a dictionary in ``data``, judged on its first rows (nested ones keep
    it); True: all of them."""
    import pyarrow.compute as pc

    sample = data.slice(0, DICTIONARY_SAMPLE_ROWS)  # counting every distinct value cost more than the write
    rows = max(1, sample.num_rows)
    keep: list[str] = []
    for name, column in zip(sample.column_names, sample.columns, strict=True):
        if pa.types.is_nested(column.type):
            keep.append(name)
            continue
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            keep.append(name)
            continue
        if distinct <= DICTIONARY_MAX_DISTINCT_SHARE * rows:
            keep.append(name)
    return True if len(keep) == data.num_columns else keep


@dataclass
class Writers:
    table: Table
    schema: pa.Schema
    codec: str
    open: dict[str, FileWriter] = field(default_factory=dict)
    done: list[FileWriter] = field(default_factory=list)
    iceberg_schema: Any = None  # what the files hold when not the table's schema (v3: with row lineage)

    def get(self, directory: str, partition: tuple[int, Record]) -> FileWriter:
        current = self.open.get(directory)
        if current is None:
            path = f"{directory}/part-{len(self.done) + len(self.open):05d}-{uuid.uuid4()}.parquet"
            stream = self.table.io.new_output(path).create(overwrite=False)
            kwargs = parquet_writer_kwargs(self.table.properties) | {"compression": self.codec}
            limit = int(self.table.properties.get("write.parquet.row-group-limit", ROW_GROUP_ROWS))
            current = FileWriter(path, stream, self.schema, kwargs, partition, self.iceberg_schema or self.table.schema(),
                              row_group_rows=max(1, limit))
            self.open[directory] = current
        return current

    def roll(self, directory: str) -> None:
        current = self.open.pop(directory, None)
        if current is not None:
            current.close()
            self.done.append(current)

    def close(self) -> list[FileWriter]:
        with self:  # one that fails to close leaves the others closed too
            for directory in list(self.open):
                self.roll(directory)
        return self.done

    def __enter__(self) -> Writers:
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        """On a failure inside the block, every open file is closed without raising, and the failure goes on
        as it was. Closing them as on success wrote what they held to a stream that had failed: a disk that
        filled mid-merge was reported as ``ArrowInvalid: Operation on closed file`` instead of ``[errno 28] No
        space left on device`` (2026-12-01). What they wrote is the action's to remove (its group's
        directory)."""
        if error is not None:
            for directory in list(self.open):
                self.open.pop(directory).abandon()


def is_empty_dir(table: Table, directory: str) -> bool:
    return not exists(table.io, directory) and not list_files(table.io, directory)


def write(writer: FileWriter, schema: Any, batch: pa.RecordBatch) -> None:
    if batch.num_rows == 0:
        return
    writer.add(batch)  # converted to the file's schema as a row group is written (FileWriter.flush)


def write_rolling(writers: Writers, directory: str, batch: pa.RecordBatch, rows_per_file: int,
                   partition: tuple[int, Record]) -> None:
    schema = writers.table.schema()
    offset = 0
    while offset < batch.num_rows:
        writer = writers.get(directory, partition)
        take = min(rows_per_file - writer.rows, batch.num_rows - offset)
        write(writer, schema, batch.slice(offset, take))
        offset += take
        if writer.rows >= rows_per_file:
            writers.roll(directory)
