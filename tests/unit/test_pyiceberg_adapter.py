"""What we rely on in pyiceberg's private API (autooptimize/iceberg/internals.py), pinned one by one.

When a pyiceberg upgrade changes one of these, the failure is here, named, rather than a wrong file in
the middle of a rewrite. The table is tiny and real: its schema, a spec, its write properties, and
Parquet files written to disk and read back.
"""

from __future__ import annotations

import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType, StructType

from autooptimize.iceberg.internals import (
    inherit_from_manifest,
    nested_column,
    parquet_writer_kwargs,
    record_slots,
    set_slot,
    slot,
    split_by_partition,
    to_file_schema,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "s", StructType(NestedField(4, "a", LongType(), required=False)), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"),
                     PartitionField(1, 1001, BucketTransform(4), "id_bucket"), spec_id=3)


def _rows() -> pa.Table:
    plain = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.large_string()),
                       pa.field("s", pa.struct([pa.field("a", pa.int64())]))])
    return pa.table({"id": list(range(12)), "region": ["eu", "us", None, "eu"] * 3,
                     "s": [{"a": i * 10} for i in range(12)]}, schema=plain)


def test_split_by_partition_keeps_every_row_once_under_icebergs_own_transforms():
    data = _rows()
    parts = list(split_by_partition(SPEC, SCHEMA, data))
    seen: list[int] = []
    for part in parts:
        rows = part.arrow_table_partition
        record = part.partition_key.partition
        regions = set(rows.column("region").to_pylist())
        assert regions == {record[0]}, "a partition's rows share its identity value"
        # bucket[4] is Iceberg's murmur3 (the same value Java computes), never Python's hash
        assert set(BucketTransform(4).transform(LongType())(i) for i in rows.column("id").to_pylist()) == {record[1]}
        region = "null" if record[0] is None else record[0]
        assert part.partition_key.to_path() == f"region={region}/id_bucket={record[1]}"
        seen += rows.column("id").to_pylist()
    assert sorted(seen) == list(range(12))
    assert {p.partition_key.partition[0] for p in parts} == {"eu", "us", None}


def test_nested_column_reads_a_struct_field_by_its_dotted_name():
    data = _rows()
    assert nested_column(data, "s.a").to_pylist() == [i * 10 for i in range(12)]
    assert nested_column(data, "region").to_pylist() == data.column("region").to_pylist()


def test_parquet_writer_kwargs_map_the_tables_write_properties():
    kwargs = parquet_writer_kwargs({"write.parquet.compression-codec": "zstd", "write.parquet.compression-level": "7",
                                    "write.parquet.page-size-bytes": "65536", "write.parquet.dict-size-bytes": "131072",
                                    "write.parquet.page-row-limit": "5000"})
    assert kwargs == {"compression": "zstd", "compression_level": 7, "data_page_size": 65536,
                      "dictionary_pagesize_limit": 131072, "write_batch_size": 5000}
    assert parquet_writer_kwargs({"write.parquet.compression-codec": "uncompressed"})["compression"] == "none"
    defaults = parquet_writer_kwargs({})
    assert set(defaults) == set(kwargs) and defaults["compression"] == "zstd"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the arguments must be accepted by pyarrow as they are
        pq.ParquetWriter(pa.BufferOutputStream(), pa.schema([("x", pa.int64())]), **kwargs).close()


def test_to_file_schema_gives_every_field_its_id_and_the_required_ness(tmp_path):
    batch = _rows().to_batches()[0]
    converted = to_file_schema(SCHEMA, batch)
    expected = schema_to_pyarrow(SCHEMA, include_field_ids=True)
    assert converted.schema.equals(expected, check_metadata=True)
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.Table.from_batches([converted]), path)
    written = pq.read_schema(path)
    ids = {f.name: f.metadata[b"PARQUET:field_id"] for f in written}
    assert ids == {"id": b"1", "region": b"2", "s": b"3"}
    assert written.field("s").type.field("a").metadata[b"PARQUET:field_id"] == b"4"
    assert not written.field("id").nullable
    assert pq.read_table(path).column("id").to_pylist() == list(range(12))


def _data_file() -> DataFile:
    return DataFile.from_args(content=DataFileContent.DATA, file_path="/t/data/x.parquet",
                              file_format=FileFormat.PARQUET, partition=Record(), record_count=3,
                              file_size_in_bytes=100)


def _manifest(sequence_number: int) -> ManifestFile:
    return ManifestFile.from_args(manifest_path="/t/metadata/m.avro", manifest_length=1, partition_spec_id=2,
                                  content=ManifestContent.DATA, sequence_number=sequence_number,
                                  min_sequence_number=sequence_number, added_snapshot_id=7)


@pytest.mark.parametrize(("status", "inherits"), [(ManifestEntryStatus.ADDED, True),
                                                  (ManifestEntryStatus.EXISTING, False)])
def test_inherit_from_manifest_follows_the_spec(status, inherits):
    entry = ManifestEntry.from_args(status=status, snapshot_id=None, sequence_number=None,
                                    file_sequence_number=None, data_file=_data_file())
    entry = inherit_from_manifest(entry, _manifest(5))
    assert entry.snapshot_id == 7 and entry.data_file.spec_id == 2
    # sequence numbers are inherited by ADDED entries only (Iceberg spec, "Sequence Number Inheritance")
    assert (entry.sequence_number, entry.file_sequence_number) == ((5, 5) if inherits else (None, None))
    v1 = inherit_from_manifest(ManifestEntry.from_args(status=status, snapshot_id=None, sequence_number=None,
                                                       file_sequence_number=None, data_file=_data_file()),
                               _manifest(0))
    assert (v1.sequence_number, v1.file_sequence_number) == (0, 0)  # a v1 manifest: 0 for every entry


def test_record_slots_are_the_fields_in_schema_order_and_writable():
    data_file = _data_file()
    values = record_slots(data_file)
    assert len(values) == 16  # a v2 DataFile: the v3 fields (first_row_id at 16, …) are not there
    assert values[:3] == [DataFileContent.DATA, "/t/data/x.parquet", FileFormat.PARQUET]
    assert slot(data_file, 1) == data_file.file_path and slot(data_file, 16) is None
    set_slot(data_file, 4, 9)
    assert data_file.record_count == 9  # the live list: a change is the record's
    manifest = _manifest(5)
    assert len(record_slots(manifest)) == 15 and slot(manifest, 6) == manifest.added_snapshot_id == 7
    widened = ManifestFile(*record_slots(manifest), 925)
    assert slot(widened, 15) == 925
    with pytest.raises(IndexError):
        set_slot(manifest, 15, 1)


def test_no_other_module_reaches_into_pyiceberg_privately():
    """Imports of pyiceberg's private names, and ``._data`` on its records, only in iceberg/internals.py."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("autooptimize", "tasks", "scheduler", "spark_actors"):
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "autooptimize" / "iceberg" / "internals.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg"):
                    found += [f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name.startswith("_")]
                elif isinstance(node, ast.Attribute) and node.attr == "_data":
                    found.append(f"{path.relative_to(root)}:{node.lineno}: ._data")
    assert not found, f"go through autooptimize/iceberg/internals.py: {found}"
