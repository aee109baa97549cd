"""Row lineage in v3 manifests and manifest lists (autooptimize.iceberg.v3), checked against the worked
example of Iceberg's spec ("Row lineage example", "First Row ID Assignment", "First Row ID Inheritance"):
a snapshot with first-row-id 1000 whose manifest list holds an existing manifest (first_row_id 925) and
three new ones (100 added + 25 existing rows, 0 + 100, 125 + 25) assigns 1000, 1125 and 1225, and 375
rows of id space; inside ``added1`` an EXISTING file keeps 800, the ADDED ones inherit 1000 and 1050.
Real Avro files on disk, read back through the v3 reader."""

from __future__ import annotations

from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from autooptimize.iceberg.internals import record_slots, set_slot
from autooptimize.iceberg.v3 import (
    ManifestListWriterV3,
    ManifestWriterV3,
    as_v3_file,
    first_row_id,
    manifest_first_row_id,
    read_entries,
    read_manifest_list,
)

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
SNAPSHOT = 42


def _file(path: str, rows: int, first: int | None = None) -> DataFile:
    data_file = as_v3_file(DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        record_count=rows, file_size_in_bytes=100, sort_order_id=None, equality_ids=None, key_metadata=None,
    ))
    data_file.spec_id = 0
    set_slot(data_file, 16, first)
    return data_file


def _manifest(io, directory, name: str, entries: list[tuple[ManifestEntryStatus, DataFile]]) -> ManifestFile:
    writer = ManifestWriterV3(UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(f"{directory}/{name}.avro"),
                              SNAPSHOT, "null")
    with writer:
        for status, data_file in entries:
            added = status == ManifestEntryStatus.ADDED
            writer.add_entry(ManifestEntry.from_args(status=status, snapshot_id=SNAPSHOT if added else 7,
                                                     sequence_number=None if added else 3,
                                                     file_sequence_number=None if added else 3,
                                                     data_file=data_file))
    return writer.to_manifest_file()


def test_the_specs_row_lineage_example(tmp_path):
    io = PyArrowFileIO()
    directory = f"file://{tmp_path}"
    added1 = _manifest(io, directory, "added1", [(ManifestEntryStatus.EXISTING, _file("data1", 25, 800)),
                                                 (ManifestEntryStatus.ADDED, _file("data2", 50)),
                                                 (ManifestEntryStatus.ADDED, _file("data3", 50))])
    added2 = _manifest(io, directory, "added2", [(ManifestEntryStatus.EXISTING, _file("data4", 100, 700))])
    added3 = _manifest(io, directory, "added3", [(ManifestEntryStatus.ADDED, _file("data5", 125)),
                                                 (ManifestEntryStatus.DELETED, _file("gone", 10, 600)),
                                                 (ManifestEntryStatus.EXISTING, _file("data6", 25, 500))])
    existing = ManifestFile(*record_slots(added1), None)  # an older manifest, already assigned 925
    for index, value in ((0, f"{directory}/existing.avro"), (6, 7), (4, 1), (5, 1), (15, 925)):
        set_slot(existing, index, value)
    deletes = ManifestFile(*record_slots(added1), None)
    set_slot(deletes, 0, f"{directory}/deletes.avro")
    set_slot(deletes, 3, ManifestContent.DELETES)

    path = f"{directory}/snap.avro"
    with ManifestListWriterV3(io.new_output(path), SNAPSHOT, 7, 5, 1000, "null") as writer:
        writer.add_manifests([existing, added1, added2, added3, deletes])
    assert writer.added_rows == 375  # 1000 + 375 is the table's next-row-id

    listed = {m.manifest_path.rsplit("/", 1)[-1]: m for m in read_manifest_list(io, path)}
    assert {name: manifest_first_row_id(m) for name, m in listed.items()} == {
        "existing.avro": 925, "added1.avro": 1000, "added2.avro": 1125, "added3.avro": 1225, "deletes.avro": None}
    assert {m.sequence_number for name, m in listed.items() if name.startswith("added")} == {5}

    ids = {str(e.data_file.file_path): first_row_id(e.data_file) for e in read_entries(listed["added1.avro"], io)}
    assert ids == {"data1": 800, "data2": 1000, "data3": 1050}
    entries = read_entries(listed["added3.avro"], io, discard_deleted=False)
    ids = {str(e.data_file.file_path): first_row_id(e.data_file) for e in entries}
    assert ids == {"data5": 1225, "gone": 600, "data6": 500}  # a DELETED entry takes no ids


def test_a_manifest_without_first_row_id_leaves_its_files_without_one(tmp_path):
    """Files of a table upgraded to v3 before any snapshot assigned ids: their rows' _row_id reads as null."""
    io = PyArrowFileIO()
    manifest = _manifest(io, f"file://{tmp_path}", "old", [(ManifestEntryStatus.ADDED, _file("data1", 5))])
    assert manifest_first_row_id(ManifestFile(*record_slots(manifest), None)) is None
    assert [first_row_id(e.data_file) for e in read_entries(ManifestFile(*record_slots(manifest), None), io)] == [None]
