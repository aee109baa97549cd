"""Format v3 metadata that pyiceberg 0.12 drops or cannot write: row lineage and deletion vectors.

pyiceberg 0.12 reads manifests and manifest lists with its v2 schemas, so a data file's ``first_row_id``
and a deletion vector's ``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes`` are
lost on reading (a manifest rewritten from what it read would move every row id and break every DV),
and it writes no v3 manifest or manifest list at all. This module reads both with the v3 schemas (a
v1 or v2 file reads the same, the v3 fields absent), applies the spec's inheritance, and writes v3.

The rules, from Iceberg's spec ("Row Lineage", "First Row ID Inheritance", "First Row ID Assignment",
"Snapshot Row IDs", "Deletion Vectors"):

* a data file with a null ``first_row_id`` in a manifest whose ``first_row_id`` is known inherits the
  manifest's value plus the record counts of the live (not DELETED) entries before it that also had
  none; the inherited value is written into EXISTING and DELETED entries when a manifest is rewritten;
* each data manifest without a ``first_row_id`` gets one when a manifest list is written: the
  snapshot's ``first-row-id`` (the table's ``next-row-id``) for the first, then each following one
  after the previous one's added and existing rows; the snapshot's ``added-rows`` is the id space so
  assigned and the table's ``next-row-id`` grows by it. Delete manifests get none;
* a row's ``_row_id`` is its file's value when not null, else the file's ``first_row_id`` plus its
  position (null when the file has none: written before the table was upgraded); its
  ``_last_updated_sequence_number`` is its file's value when not null, else the file's data sequence
  number. A rewrite that moves rows writes both, materialised, so neither changes;
* a deletion vector is a ``deletion-vector-v1`` blob in a Puffin file, applying to the one data file
  its ``referenced_data_file`` names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriterV2,
    ManifestWriter,
    PartitionFieldSummary,
)
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import TableVersion
from pyiceberg.types import IntegerType, ListType, LongType, NestedField, StructType

from autooptimize.errors import TableRefused
from autooptimize.iceberg.avro_reading import CachedAvroFile
from autooptimize.iceberg.internals import inherit_from_manifest, record_slots, set_slot, slot

#: Reserved field ids of the row lineage columns (spec, "Reserved Field IDs").
ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_FIELD_ID = 2147483539
ROW_ID = "_row_id"
LAST_UPDATED = "_last_updated_sequence_number"

_FILE_FIELDS = [f.name for f in DATA_FILE_TYPE[3].fields]
_FIRST_ROW_ID = _FILE_FIELDS.index("first_row_id")
_REFERENCED = _FILE_FIELDS.index("referenced_data_file")
_OFFSET = _FILE_FIELDS.index("content_offset")
_SIZE = _FILE_FIELDS.index("content_size_in_bytes")
_MANIFEST_FIRST_ROW_ID = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields].index("first_row_id")


def with_lineage(schema: Schema) -> Schema:
    """``schema`` with the two row lineage columns after its own (the columns a v3 rewrite writes)."""
    return Schema(*schema.fields,
                  NestedField(ROW_ID_FIELD_ID, ROW_ID, LongType(), required=False),
                  NestedField(LAST_UPDATED_FIELD_ID, LAST_UPDATED, LongType(), required=False),
                  schema_id=schema.schema_id, identifier_field_ids=schema.identifier_field_ids)


def with_int_equality_ids(entry_schema: Schema) -> Schema:
    """A manifest entry schema whose ``equality_ids`` hold ints, as the spec says (``list<136: int>``).
    pyiceberg 0.12 declares longs, which Iceberg Java then fails to read (ClassCastException: Long cannot
    be cast to Integer) on every scan that meets such a delete file."""
    def fix_file(field: NestedField) -> NestedField:
        if field.field_id != 135:
            return field
        return NestedField(135, field.name, ListType(136, IntegerType(), element_required=True),
                           required=field.required, doc=field.doc)

    fields = []
    for field in entry_schema.fields:
        if field.field_id == 2 and isinstance(field.field_type, StructType):
            field = NestedField(2, field.name, StructType(*[fix_file(f) for f in field.field_type.fields]),
                                required=field.required, doc=field.doc)
        fields.append(field)
    return Schema(*fields)


def first_row_id(data_file: DataFile) -> int | None:
    """The data file's ``first_row_id`` (inherited values included, when read by :func:`read_entries`)."""
    return slot(data_file, _FIRST_ROW_ID)  # type: ignore[no-any-return]


def referenced_data_file(data_file: DataFile) -> str | None:
    return slot(data_file, _REFERENCED)  # type: ignore[no-any-return]


def content_offset(data_file: DataFile) -> int | None:
    return slot(data_file, _OFFSET)  # type: ignore[no-any-return]


def content_size(data_file: DataFile) -> int | None:
    return slot(data_file, _SIZE)  # type: ignore[no-any-return]


def is_deletion_vector(data_file: DataFile) -> bool:
    """A v3 deletion vector: position deletes held in a Puffin blob."""
    return data_file.content == DataFileContent.POSITION_DELETES and data_file.file_format == FileFormat.PUFFIN


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    return slot(manifest, _MANIFEST_FIRST_ROW_ID)  # type: ignore[no-any-return]


def as_v3_file(data_file: DataFile) -> DataFile:
    """``data_file`` with room for the v3 fields (null when it had none), spec id kept."""
    values = record_slots(data_file)
    if len(values) >= len(_FILE_FIELDS):
        return data_file
    widened = DataFile(*values, *([None] * (len(_FILE_FIELDS) - len(values))))
    spec_id = getattr(data_file, "_spec_id", None)  # not a manifest field: set by whoever made the file
    if spec_id is not None:
        widened.spec_id = spec_id
    return widened


def _as_v3_manifest(manifest: ManifestFile) -> ManifestFile:
    size = len(MANIFEST_LIST_FILE_SCHEMAS[3].fields)
    values = record_slots(manifest)
    data = list(values) + [None] * max(0, size - len(values))
    return ManifestFile(*data)


# -- reading -----------------------------------------------------------------------------------------


def read_manifest_list(io: FileIO, path: str) -> list[ManifestFile]:
    """The manifests of a manifest list, ``first_row_id`` kept (any format version)."""
    with CachedAvroFile(
        io.new_input(path), MANIFEST_LIST_FILE_SCHEMAS[3],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary}, read_enums={517: ManifestContent},
    ) as reader:
        return list(reader)


def manifests_of(io: FileIO, snapshot: Snapshot | None) -> list[ManifestFile]:
    """``snapshot.manifests(io)`` with the v3 fields kept."""
    if snapshot is None:
        return []
    if not snapshot.manifest_list:
        return list(snapshot.manifests(io))
    return read_manifest_list(io, snapshot.manifest_list)


def read_entries(manifest: ManifestFile, io: FileIO, discard_deleted: bool = True) -> list[ManifestEntry]:
    """``manifest.fetch_manifest_entry`` with the v3 data file fields kept and ``first_row_id`` inherited."""
    try:
        with CachedAvroFile(
            io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3],
            read_types={-1: ManifestEntry, 2: DataFile},
            read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
        ) as reader:
            entries = [inherit_from_manifest(entry, manifest) for entry in reader]
    except ValueError as exc:  # an enum value the spec this version knows does not define
        if "DataFileContent" in str(exc):
            reason = "unsupported_delete_content"
        elif "FileFormat" in str(exc) or "is not a valid" in str(exc):
            reason = "unsupported_file_format"
        else:
            raise
        raise TableRefused(reason, f"manifest {manifest.manifest_path} lists a file this version does not know "
                                   f"({exc}); the table is left untouched") from None
    next_row_id = manifest_first_row_id(manifest) if manifest.content == ManifestContent.DATA else None
    if next_row_id is not None:
        for entry in entries:
            if entry.status != ManifestEntryStatus.DELETED and first_row_id(entry.data_file) is None:
                set_slot(entry.data_file, _FIRST_ROW_ID, next_row_id)
                next_row_id += int(entry.data_file.record_count)
    return [e for e in entries if not discard_deleted or e.status != ManifestEntryStatus.DELETED]


# -- writing -----------------------------------------------------------------------------------------


class ManifestWriterV3(ManifestWriter):
    """A v3 manifest of data files (``DeleteManifestWriterV3`` for delete files and DVs)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DATA

    @property
    def version(self) -> TableVersion:
        return 3

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "data" if self.content() == ManifestContent.DATA else "deletes"}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        schema = with_int_equality_ids(self._with_partition(3))  # records carry the v3 fields (as_v3_file)
        return AvroOutputFile[ManifestEntry](output_file=self._output_file, file_schema=schema,
                                             record_schema=schema, schema_name="manifest_entry",
                                             metadata=self._meta)

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        if entry.sequence_number is None:
            if entry.snapshot_id is not None and entry.snapshot_id != self._snapshot_id:
                raise ValueError(f"found an unassigned sequence number for an entry from snapshot {entry.snapshot_id}")
            if entry.status != ManifestEntryStatus.ADDED:
                raise ValueError("only ADDED entries may have a null sequence number")
        data_file = as_v3_file(entry.data_file)
        if data_file.content != DataFileContent.DATA and first_row_id(data_file) is not None:
            set_slot(data_file, _FIRST_ROW_ID, None)  # the spec: always null for delete files
        return ManifestEntry.from_args(status=entry.status, snapshot_id=entry.snapshot_id,
                                       sequence_number=entry.sequence_number,
                                       file_sequence_number=entry.file_sequence_number, data_file=data_file)


class DeleteManifestWriterV3(ManifestWriterV3):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES


class ManifestListWriterV3(ManifestListWriterV2):
    """A v3 manifest list: existing ``first_row_id`` values kept, each data manifest without one assigned
    the next id range (:attr:`added_rows` is the id space assigned in all)."""

    def __init__(self, output_file: OutputFile, snapshot_id: int, parent_snapshot_id: int | None,
                 sequence_number: int, first_row_id: int, compression: Any) -> None:
        super().__init__(output_file, snapshot_id, parent_snapshot_id, sequence_number, compression)
        self._format_version = 3
        self._meta = {**self._meta, "format-version": "3", "first-row-id": str(first_row_id)}
        self.first_row_id = first_row_id
        self._next_row_id = first_row_id

    @property
    def added_rows(self) -> int:
        return self._next_row_id - self.first_row_id

    def __enter__(self) -> ManifestListWriterV3:
        self._writer = AvroOutputFile[ManifestFile](
            output_file=self._output_file, record_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
            file_schema=MANIFEST_LIST_FILE_SCHEMAS[3], schema_name="manifest_file", metadata=self._meta,
        )
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        manifest = super().prepare_manifest(_as_v3_manifest(manifest_file))  # a copy with 16 slots
        if manifest.content == ManifestContent.DATA:
            if manifest_first_row_id(manifest) is None:
                set_slot(manifest, _MANIFEST_FIRST_ROW_ID, self._next_row_id)
                self._next_row_id += int(manifest.added_rows_count or 0) + int(manifest.existing_rows_count or 0)
        else:
            set_slot(manifest, _MANIFEST_FIRST_ROW_ID, None)
        return manifest


def file_key(data_file: DataFile) -> str:
    """What tells a live file from every other: its path, and for a deletion vector also its blob's offset
    (one Puffin file holds the vectors of many data files, each its own manifest entry)."""
    if is_deletion_vector(data_file):
        return f"{data_file.file_path}#{content_offset(data_file)}"
    return str(data_file.file_path)


def vector_positions(io: FileIO, path: str, offset: int | None,
                     referenced: str | None = None) -> tuple[str, list[int]]:
    """(referenced data file, deleted positions) of the deletion vector at ``offset`` of the Puffin file
    ``path`` (the blob for ``referenced`` when the offset is not known). Raises MalformedDeleteFile."""
    from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
    from pyiceberg.table.puffin import PuffinFile

    with io.new_input(path).open() as stream:
        payload = stream.read()
    try:
        puffin = PuffinFile(payload)
        vectors = deletion_vectors_from_puffin_file(puffin)
    except (ValueError, KeyError) as exc:
        raise MalformedDeleteFile(f"deletion vector file {path} cannot be read as Puffin: {exc}") from None
    for blob, vector in zip(puffin.footer.blobs, vectors, strict=True):
        if blob.type != "deletion-vector-v1":
            continue
        if (offset is not None and blob.offset == offset) or (offset is None and vector.referenced_data_file == referenced):
            return vector.referenced_data_file, [int(p) for p in vector.to_vector().to_pylist()]
    raise MalformedDeleteFile(f"deletion vector file {path} has no deletion-vector-v1 blob at offset {offset}"
                              + (f" for {referenced}" if referenced else ""))


class MalformedDeleteFile(ValueError):
    """A delete file or deletion vector that cannot be read as the spec defines it."""


def data_files_v3(files: Iterable[DataFile]) -> list[DataFile]:
    return [as_v3_file(f) for f in files]


def _write_v3_metadata_json() -> None:
    """pyiceberg 0.12 models every field of v3 table metadata but refuses to serialise it
    (``TableMetadataV3.model_dump_json`` raises), so no catalog that writes metadata files itself (SQL,
    Glue, Hive) could commit to a v3 table. Serialise it as every other version is: the same pydantic
    model, by alias, without nulls. Iceberg Java reads the result back in the ``java`` tests."""
    from pyiceberg.table.metadata import TableMetadataV3
    from pyiceberg.typedef import IcebergBaseModel

    if TableMetadataV3.model_dump_json is not IcebergBaseModel.model_dump_json:
        TableMetadataV3.model_dump_json = IcebergBaseModel.model_dump_json  # type: ignore[method-assign]


_write_v3_metadata_json()
