"""Avro files read with reader trees kept per schema (autooptimize/iceberg/avro_reading.py) read exactly as
pyiceberg's own AvroFile reads them, file after file and schema after schema."""

from __future__ import annotations

from pyiceberg.avro.file import AvroFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from autooptimize.iceberg import avro_reading
from autooptimize.iceberg.avro_reading import CachedAvroFile

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))
BY_ID = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "id"), spec_id=1)
BY_S = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "s"), spec_id=2)


def _manifest(io, path: str, spec: PartitionSpec, values: list[object]) -> str:
    with ManifestWriterV2(spec, SCHEMA, io.new_output(path), 42, "deflate") as writer:
        for i, value in enumerate(values):
            data_file = DataFile.from_args(
                content=DataFileContent.DATA, file_path=f"data-{i}.parquet", file_format=FileFormat.PARQUET,
                partition=Record(value), record_count=10 + i, file_size_in_bytes=100 + i, sort_order_id=None,
                equality_ids=None, key_metadata=None, lower_bounds={1: b"\x01" * 8}, value_counts={1: 10 + i})
            writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=42,
                                                     data_file=data_file))
    return path


def _read(cls, io, path: str) -> list[tuple[object, ...]]:
    reader = cls(io.new_input(path), MANIFEST_ENTRY_SCHEMAS[2], read_types={-1: ManifestEntry, 2: DataFile},
                 read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent})
    with reader as entries:
        return [(e.status, e.snapshot_id, e.data_file.file_path, e.data_file.partition, e.data_file.record_count,
                 e.data_file.lower_bounds, e.data_file.value_counts) for e in entries]


def test_reads_as_pyiceberg_with_one_tree_per_schema(tmp_path):
    io = PyArrowFileIO()
    avro_reading._trees.clear()
    paths = [_manifest(io, f"file://{tmp_path}/a.avro", BY_ID, [1, 2, None]),
             _manifest(io, f"file://{tmp_path}/b.avro", BY_ID, [3]),
             _manifest(io, f"file://{tmp_path}/c.avro", BY_S, ["x", None])]
    for path in paths + paths:
        assert _read(CachedAvroFile, io, path) == _read(AvroFile, io, path)
    assert len(avro_reading._trees) == 2  # two partition types: two schemas, each resolved once
    assert [row[3] for row in _read(CachedAvroFile, io, paths[2])] == [Record("x"), Record(None)]
