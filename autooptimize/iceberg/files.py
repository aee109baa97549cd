"""Live files of a snapshot grouped by partition, and partition expressions (``col=value,…``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from autooptimize.domain.partitions import PartitionRef, format_human
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.manifest_cache import live_entries_of
from autooptimize.iceberg.partitions import human_values, parse_human, ref_of
from autooptimize.iceberg.v3 import file_key, manifests_of


@dataclass(frozen=True)
class LiveFile:
    """A live file of a snapshot with the sequence numbers its manifest entry gives it."""

    data_file: DataFile
    sequence_number: int | None
    file_sequence_number: int | None
    added_ms: int | None = None  # when the snapshot that added it was committed (None: no longer known)

    @property
    def path(self) -> str:
        """The file's identity: its path (for a deletion vector, path and blob offset; see v3.file_key)."""
        return file_key(self.data_file)

    @property
    def location(self) -> str:
        """Where the file is (a deletion vector shares its Puffin file with others)."""
        return str(self.data_file.file_path)

    @property
    def size(self) -> int:
        return int(self.data_file.file_size_in_bytes)

    @property
    def record_count(self) -> int:
        return int(self.data_file.record_count)


@dataclass(frozen=True)
class DeleteStats:
    """A partition's row-level delete load, from metadata alone (what decide weighs for compact_deletes).

    ``rows_deleted_estimate`` sums the delete files' record counts: exact for position deletes that do
    not overlap, an upper bound otherwise (an equality delete row may match many data rows or none).
    """

    files: int
    bytes: int
    position_files: int
    equality_files: int
    rows_deleted_estimate: int
    data_rows: int

    @property
    def deleted_fraction_estimate(self) -> float:
        return min(1.0, self.rows_deleted_estimate / self.data_rows) if self.data_rows else 0.0


@dataclass
class PartitionFiles:
    """The live data and delete files of one partition of one spec.

    ``key`` is the partition's identity inside the service (JSON of its Iceberg values, see
    autooptimize.domain.partitions); ``path`` is Iceberg's partition path, used for directories;
    ``human`` is what people read and type (``ts_hour=2024-06-01-12``).
    """

    spec_id: int
    key: str  # canonical JSON of the Iceberg values, e.g. '[473184]'; "" when unpartitioned
    values: dict[str, Any]  # human-readable values per partition field (None for null)
    record: Any  # the pyiceberg partition Record, copied onto rewritten files
    path: str = ""  # Iceberg's partition path, e.g. "ts_hour=2024-06-01-12"; "" when unpartitioned
    human: str = ""  # the human form, parsed back by autooptimize.iceberg.partitions.parse_human
    data_files: list[LiveFile] = field(default_factory=list)
    delete_files: list[LiveFile] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.data_files)

    @property
    def newest_ms(self) -> int | None:
        """When the newest data file was committed, if any file's snapshot is still known."""
        known = [f.added_ms for f in self.data_files if f.added_ms is not None]
        return max(known) if known else None

    @property
    def delete_stats(self) -> DeleteStats:
        position = [f for f in self.delete_files if f.data_file.content == DataFileContent.POSITION_DELETES]
        return DeleteStats(
            files=len(self.delete_files),
            bytes=sum(f.size for f in self.delete_files),
            position_files=len(position),
            equality_files=len(self.delete_files) - len(position),
            rows_deleted_estimate=sum(f.record_count for f in self.delete_files),
            data_rows=sum(f.record_count for f in self.data_files),
        )


def partition_key(spec: PartitionSpec, schema: Schema, record: Any) -> str:
    """The partition's identity inside the service: JSON of its Iceberg values ("" when unpartitioned)."""
    return ref_of(spec, schema, record).key if spec.fields else ""


def partition_values(spec: PartitionSpec, schema: Schema, record: Any) -> dict[str, Any]:
    """Human-readable value per field (None for null), as Iceberg prints them."""
    if not spec.fields:
        return {}
    return dict(human_values(spec, schema, ref_of(spec, schema, record)))


def partition_path(spec: PartitionSpec, schema: Schema, record: Any) -> str:
    """Iceberg's partition path; "" when unpartitioned. Files we write go under :func:`partition_dir`."""
    return spec.partition_to_path(record, schema) if spec.fields else ""


def partition_dir(path: str) -> str:
    """A directory name for files we write into a partition: its path with every character other than
    letters, digits and ``_ . = - /`` replaced by ``_``. Hadoop paths decode ``%XX`` escapes and Spark
    reads ``[`` ``]`` ``{`` ``*`` as globs, so a raw value would send Spark somewhere else."""
    return re.sub(r"[^A-Za-z0-9_.=/-]", "_", path).replace("..", "__")


def live_entries(table: Table, snapshot: Snapshot | None) -> Iterable[ManifestEntry]:
    if snapshot is None:
        return
    for manifest in manifests_of(table.io, snapshot):
        yield from live_entries_of(manifest, table.io)


def live_partitions(table: Table, snapshot: Snapshot | None = None) -> dict[tuple[int, str], PartitionFiles]:
    """Every partition of ``snapshot`` (default: current) with its live data and delete files."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    schema = table.schema()
    specs = table.specs()
    parts: dict[tuple[int, str], PartitionFiles] = {}
    # when writers added each file; files our own REPLACE commits wrote carry no time, so a merge never makes
    # a partition look live to the live-partition policy
    committed_ms = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots
                    if s.summary is None or s.summary.operation.value != "replace"}
    for entry in live_entries(table, snapshot):
        df = entry.data_file
        spec = specs[df.spec_id]
        key = partition_key(spec, schema, df.partition)
        pf = parts.get((df.spec_id, key))
        if pf is None:
            pairs = human_values(spec, schema, PartitionRef.of_key(df.spec_id, key)) if spec.fields else []
            pf = PartitionFiles(
                spec_id=df.spec_id,
                key=key,
                values=dict(pairs),
                record=df.partition,
                path=partition_path(spec, schema, df.partition),
                human=format_human(pairs),
            )
            parts[(df.spec_id, key)] = pf
        live = LiveFile(df, entry.sequence_number, entry.file_sequence_number, committed_ms.get(entry.snapshot_id))
        (pf.data_files if df.content == DataFileContent.DATA else pf.delete_files).append(live)
    return parts


def parse_partition(table: Table, expression: str) -> PartitionRef:
    """The partition of the table's current spec that ``expression`` names, in the human form ``status``
    prints (``ts_hour=2024-06-01-12``, ``,`` or ``/`` between fields). Raises InvalidArgument naming the
    problem and what would be valid."""
    if not table.spec().fields:
        raise InvalidArgument(f"table {'.'.join(table.name())} is unpartitioned; omit --partition")
    return parse_human(table.spec(), table.schema(), expression)
