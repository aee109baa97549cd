"""Every call into pyiceberg's private API, in one module.

pyiceberg 0.12 keeps these behind a leading underscore, so a minor release may change them without
notice; pyproject pins ``pyiceberg==0.12.*``. Each is wrapped here under a name that says what we rely
on, and tests/unit/test_pyiceberg_adapter.py pins that behaviour on a tiny table's schema, spec and
files: a pyiceberg upgrade that changes one fails there, in one place, rather than in a rewrite.

Not wrapped (they are subclass hooks, not calls): the manifest writers of iceberg/v3.py and
iceberg/staging.py override ``_meta`` and use ``_with_partition``, ``_output_file`` and
``_snapshot_id`` of pyiceberg's ``ManifestWriter``; tests/unit/test_row_lineage_metadata.py and the
delete-compaction tests read back what they write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import (
    _determine_partitions,
    _get_field_from_arrow_table,
    _get_parquet_writer_kwargs,
    _to_requested_schema,
)
from pyiceberg.manifest import FileFormat, ManifestEntry, ManifestFile, _inherit_from_manifest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Properties

__all__ = ["inherit_from_manifest", "nested_column", "parquet_writer_kwargs", "record_slots", "set_slot", "slot",
           "split_by_partition", "to_file_schema"]


def split_by_partition(spec: PartitionSpec, schema: Schema, data: pa.Table) -> Iterable[Any]:
    """The rows of ``data`` split by ``spec`` with pyiceberg's own transforms (the code its writer uses):
    one item per partition met, with ``.partition_key`` (``.partition``: the Record; ``.to_path()``:
    Iceberg's directory name) and ``.arrow_table_partition`` (its rows, in their order)."""
    return _determine_partitions(spec, schema, data)


def nested_column(data: pa.Table, name: str) -> pa.Array:
    """The column of ``data`` at the dotted ``name`` (``a.b`` for a struct's field), as one array."""
    return _get_field_from_arrow_table(data, name)


def parquet_writer_kwargs(properties: Properties) -> dict[str, Any]:
    """pyarrow ParquetWriter arguments from the table's ``write.parquet.*`` properties (codec and level,
    page and dictionary page sizes, page row limit), as pyiceberg's own writer uses them."""
    return _get_parquet_writer_kwargs(properties)


def to_file_schema(schema: Schema, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (read in ``schema``) as pyiceberg writes it: field ids on every field, required-ness and
    the physical types of Iceberg's Parquet mapping."""
    return _to_requested_schema(schema, schema, batch, include_field_ids=True,
                                format_model=FileFormatFactory.get(FileFormat.PARQUET))


def inherit_from_manifest(entry: ManifestEntry, manifest: ManifestFile) -> ManifestEntry:
    """``entry`` as read from ``manifest``, with what the spec says it inherits filled in: snapshot id,
    data and file sequence numbers (an ADDED entry, or a v1 manifest), the data file's spec id."""
    return _inherit_from_manifest(entry, manifest)


# pyiceberg's Records (DataFile, ManifestFile) hold their fields in a list, ``_data``, sized by the
# schema they were made with; the v3 fields (first_row_id, referenced_data_file, content offset and
# size) have no accessor in 0.12 when a record was made with fewer slots.


def record_slots(record: Any) -> list[Any]:
    """Every field value of ``record`` in schema order (the live list: a change is the record's)."""
    return record._data  # type: ignore[no-any-return]


def slot(record: Any, index: int) -> Any:
    """Field ``index`` of ``record``; None when the record was made with fewer fields."""
    values = record_slots(record)
    return values[index] if len(values) > index else None


def set_slot(record: Any, index: int, value: Any) -> None:
    """Set field ``index`` of ``record`` in place (IndexError when it was made with fewer fields)."""
    record_slots(record)[index] = value
