"""Live files of a snapshot grouped by partition, and partition expressions (``col=value,…``)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import (
    DateType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
)

from autooptimize.errors import InvalidArgument


@dataclass(frozen=True)
class LiveFile:
    """A live file of a snapshot with the sequence numbers its manifest entry gives it."""

    data_file: DataFile
    sequence_number: int | None
    file_sequence_number: int | None

    @property
    def path(self) -> str:
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
    """The live data and delete files of one partition of one spec."""

    spec_id: int
    key: str  # the partition path, e.g. "day=2024-01-01/region=eu"; "" when unpartitioned
    values: dict[str, Any]  # human-readable values per partition field
    record: Any  # the pyiceberg partition Record, copied onto rewritten files
    data_files: list[LiveFile] = field(default_factory=list)
    delete_files: list[LiveFile] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.data_files)

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
    return spec.partition_to_path(record, schema) if spec.fields else ""


def partition_values(spec: PartitionSpec, schema: Schema, record: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pos, pfield in enumerate(spec.fields):
        source_type = schema.find_field(pfield.source_id).field_type
        result_type = pfield.transform.result_type(source_type)
        values[pfield.name] = pfield.transform.to_human_string(result_type, record[pos])
    return values


def live_entries(table: Table, snapshot: Snapshot | None) -> Iterable[ManifestEntry]:
    if snapshot is None:
        return
    for manifest in snapshot.manifests(table.io):
        yield from manifest.fetch_manifest_entry(table.io, discard_deleted=True)


def live_partitions(table: Table, snapshot: Snapshot | None = None) -> dict[tuple[int, str], PartitionFiles]:
    """Every partition of ``snapshot`` (default: current) with its live data and delete files."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    schema = table.schema()
    specs = table.specs()
    parts: dict[tuple[int, str], PartitionFiles] = {}
    for entry in live_entries(table, snapshot):
        df = entry.data_file
        spec = specs[df.spec_id]
        key = partition_key(spec, schema, df.partition)
        pf = parts.get((df.spec_id, key))
        if pf is None:
            pf = PartitionFiles(
                spec_id=df.spec_id,
                key=key,
                values=partition_values(spec, schema, df.partition),
                record=df.partition,
            )
            parts[(df.spec_id, key)] = pf
        live = LiveFile(df, entry.sequence_number, entry.file_sequence_number)
        (pf.data_files if df.content == DataFileContent.DATA else pf.delete_files).append(live)
    return parts


def _canonical(value: str, result_type: Any, field_name: str) -> str:
    """Normalise a user-typed partition value so it compares equal to pyiceberg's human string."""
    try:
        if isinstance(result_type, IntegerType | LongType):
            return str(int(value))
        if isinstance(result_type, DateType):
            return dt.date.fromisoformat(value).isoformat()
        if isinstance(result_type, StringType):
            return value
        if str(result_type) == "uuid":
            return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument(
            f"partition value {value!r} for {field_name!r} is not a valid {result_type}"
        ) from None
    if not isinstance(result_type, PrimitiveType):
        raise InvalidArgument(f"partition field {field_name!r} has unsupported type {result_type}")
    return value


def parse_partition(table: Table, expression: str) -> dict[str, str]:
    """Parse ``col=value[,col2=value2]`` (``/`` also separates) against the table's current spec.

    Returns canonical human-readable values per partition field. Raises InvalidArgument naming the
    problem and the valid field names when the expression does not describe exactly one partition.
    """
    spec = table.spec()
    schema = table.schema()
    names = [f.name for f in spec.fields]
    if not names:
        raise InvalidArgument(f"table {'.'.join(table.name())} is unpartitioned; omit --partition")
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgument(f"partition expression is empty; use {','.join(n + '=…' for n in names)}")
    pairs: dict[str, str] = {}
    for item in expression.replace("/", ",").split(","):
        item = item.strip()
        if "=" not in item:
            raise InvalidArgument(
                f"partition expression {expression!r} is malformed at {item!r}; "
                f"use {','.join(n + '=value' for n in names)}"
            )
        name, value = (s.strip() for s in item.split("=", 1))
        if name not in names:
            raise InvalidArgument(
                f"partition field {name!r} is not in the table's partition spec; valid fields: {', '.join(names)}"
            )
        if name in pairs:
            raise InvalidArgument(f"partition field {name!r} is given twice in {expression!r}")
        pfield = next(f for f in spec.fields if f.name == name)
        result_type = pfield.transform.result_type(schema.find_field(pfield.source_id).field_type)
        pairs[name] = value if value == "null" else _canonical(value, result_type, name)
    missing = [n for n in names if n not in pairs]
    if missing:
        raise InvalidArgument(
            f"partition expression {expression!r} misses field(s) {', '.join(missing)}; "
            f"a partition is {','.join(n + '=value' for n in names)}"
        )
    return {n: pairs[n] for n in names}


def matches(pf: PartitionFiles, spec_id: int, values: dict[str, str]) -> bool:
    return pf.spec_id == spec_id and {k: str(v) for k, v in pf.values.items()} == values


def key_from_values(values: dict[str, str]) -> str:
    """The partition path pyiceberg's ``partition_to_path`` gives for these human-readable values."""
    from urllib.parse import quote_plus

    return "/".join(f"{quote_plus(k, safe='')}={quote_plus(str(v), safe='')}" for k, v in values.items())
