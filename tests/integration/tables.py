"""Helpers that build real Iceberg tables of small files for the integration tests."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

_counter = itertools.count()

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "day", DateType(), required=True),
    NestedField(3, "v", StringType(), required=False),
    NestedField(4, "x", DoubleType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
ARROW = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("day", pa.date32(), nullable=False),
    pa.field("v", pa.string()),
    pa.field("x", pa.float64()),
])
DAY1 = dt.date(2026, 1, 1)
DAY2 = dt.date(2026, 1, 2)


def batch(first_id: int, rows: int, day: dt.date = DAY1) -> pa.Table:
    return pa.table({
        "id": list(range(first_id, first_id + rows)),
        "day": [day] * rows,
        "v": [f"value-{i}" for i in range(first_id, first_id + rows)],
        "x": [i * 0.5 for i in range(first_id, first_id + rows)],
    }, schema=ARROW)


def make_table(catalog: Any, files_per_day: dict[dt.date, int], rows: int = 50, name: str | None = None) -> Any:
    """A table with one commit (and one file) per batch; ids are unique across the table."""
    identifier = f"test.{name or 't'}_{next(_counter)}"
    table = catalog.create_table(identifier, schema=SCHEMA, partition_spec=SPEC)
    next_id = 0
    for day, count in files_per_day.items():
        for _ in range(count):
            table.append(batch(next_id, rows, day))
            next_id += rows
    return table


def identifier(table: Any) -> str:
    return ".".join(table.name()[-2:])


def live_files(table: Any) -> list[str]:
    table.refresh()
    return [str(r["file_path"]) for r in table.inspect.files().select(["file_path"]).to_pylist()]


def second_reader_checksum(table: Any) -> tuple[int, str]:
    """Rows and the one content digest of the live files read with plain pyarrow by field id (not through
    pyiceberg's scan): the reader the service verifies every rewrite with."""
    from autooptimize.iceberg.checksum import parquet_digest

    table.refresh()
    digest = parquet_digest(table.schema(), live_files(table), table.io)
    return digest.rows, digest.checksum


def files_on_disk(table: Any) -> set[str]:
    import os

    root = table.location().removeprefix("file://")
    found = set()
    for dirpath, _, names in os.walk(root):
        for n in names:
            found.add(os.path.join(dirpath, n))
    return found


def action_outputs(table: Any) -> set[str]:
    """Files on disk inside an autooptimize action's output directory (``…/ao-<action id>/…``)."""
    import re

    location = table.location().removeprefix("file://")
    return {f for f in files_on_disk(table) if re.search(r"/ao-[0-9a-f-]{36}/", f.removeprefix(location))}


def unreferenced_manifests(table: Any) -> set[str]:
    """Avro files of the table's metadata directory that no snapshot's manifest list names and that are no
    manifest list themselves: manifests written and never committed."""
    import os

    table.refresh()
    referenced = set()
    for snapshot in table.metadata.snapshots:
        referenced.add(snapshot.manifest_list.removeprefix("file://"))
        referenced.update(m.manifest_path.removeprefix("file://") for m in snapshot.manifests(table.io))
    metadata = table.location().removeprefix("file://") + "/metadata"
    return {os.path.join(metadata, n) for n in os.listdir(metadata)
            if n.endswith(".avro")} - referenced


def key_of(day: dt.date) -> str:
    """The partition's key inside the service for a day partition: JSON of days since 1970."""
    from autooptimize.domain.partitions import encode_key

    return encode_key(((day - dt.date(1970, 1, 1)).days,))
