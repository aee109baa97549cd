"""Content checksums read without Spark: a table as pyiceberg reads it, and Parquet files read directly.

Both are the one content digest of autooptimize/engines/digest.py, ``rows:h1:h2``, so they equal what the
Spark path measures on the same rows. :func:`parquet_digest` is the independent reader the verify
ladder checks Spark's (and pyiceberg's) reading against: plain pyarrow, each column found by its
Parquet field id, so a column that another reader maps by name or position to the wrong field makes
the two digests differ.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField, StructType

from autooptimize.engines.digest import ContentDigest, DigestAccumulator, arrow_digest
from autooptimize.errors import VerificationFailed

_FIELD_ID = b"PARQUET:field_id"


def arrow_checksum(data: pa.Table) -> str:
    """``rows:h1:h2`` of ``data`` (order-independent; nulls and column positions count)."""
    return arrow_digest(data).checksum


def table_checksum(table: Table) -> str:
    """Checksum of the table's current snapshot, read through pyiceberg."""
    table.refresh()
    return arrow_checksum(table.scan().to_arrow())


def parquet_digest(schema: Schema, paths: Iterable[str], io: FileIO) -> ContentDigest:
    """The digest of the rows of Parquet ``paths`` in ``schema``, each column (nested struct fields too)
    taken by its field id, cast to the schema's type (promotions widen); a field a file lacks is null.
    No delete file is applied. Raises VerificationFailed for a file without field ids."""
    target = schema_to_pyarrow(schema, include_field_ids=False)
    digest = DigestAccumulator()
    for path in paths:
        with io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            by_id = _ids(parquet.schema_arrow)
            if not by_id and parquet.schema_arrow.names:
                raise VerificationFailed(f"{path} has no Parquet field ids; it cannot be read by field id")
            wanted = [by_id[f.field_id] for f in schema.fields if f.field_id in by_id]
            for batch in parquet.iter_batches(columns=[parquet.schema_arrow.field(i).name for i in wanted]):
                digest.add(_project(schema.fields, target, _ids(batch.schema), batch.columns, batch.num_rows))
    return digest.digest


def _ids(fields: pa.Schema | pa.StructType) -> dict[int, int]:
    """Field id → position among ``fields`` (fields without an id are left out)."""
    out = {}
    for i in range(len(fields) if isinstance(fields, pa.Schema) else fields.num_fields):
        field = fields.field(i)
        if field.metadata and _FIELD_ID in field.metadata:
            out[int(field.metadata[_FIELD_ID])] = i
    return out


def _project(fields: tuple[NestedField, ...] | list[NestedField], target: pa.Schema | pa.StructType,
             by_id: dict[int, int], columns: list[pa.Array], rows: int) -> pa.RecordBatch:
    arrays = [_column(f, target.field(i).type, by_id, columns, rows) for i, f in enumerate(fields)]
    return pa.RecordBatch.from_arrays(arrays, names=[f.name for f in fields])


def _column(field: NestedField, want: pa.DataType, by_id: dict[int, int], columns: list[pa.Array],
            rows: int) -> pa.Array:
    storage = want.storage_type if isinstance(want, pa.ExtensionType) else want
    if field.field_id not in by_id:
        return pa.nulls(rows, storage)
    column = columns[by_id[field.field_id]]
    if isinstance(field.field_type, StructType):
        inner = _project(field.field_type.fields, storage, _ids(column.type), column.flatten(), rows)
        return pa.StructArray.from_arrays(inner.columns, fields=list(storage), mask=column.is_null())
    if isinstance(column.type, pa.ExtensionType):
        column = column.storage
    return column.cast(storage)
