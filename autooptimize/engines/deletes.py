"""What delete compaction's two jobs share (the Spark SQL job, spark_actors/deletes.py, and the pyarrow
path, arrow/deletes.py): the files it takes with their sequence numbers, what it returns, the fields an
equality delete may name, and one join key of a data file's path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import PrimitiveType

from autooptimize.engines.digest import ContentDigest
from autooptimize.errors import ActionRefused

LOCAL_SCHEME = r"^file:/+"  # file:/x, file:///x: stripped to /x by join_key and its Spark and pyarrow twins


def join_key(path: str) -> str:
    """The join key of a file path: ``file:/x``, ``file:///x`` and ``/x`` all become ``/x``."""
    return re.sub(LOCAL_SCHEME, "/", path)


@dataclass(frozen=True)
class SequencedFile:
    """A data or delete file with the data sequence number its manifest entry gives it."""

    path: str
    sequence_number: int
    equality_ids: tuple[int, ...] | None = None  # equality delete files only
    content_offset: int | None = None  # a deletion vector (Iceberg v3): its blob's offset in the Puffin file


@dataclass(frozen=True)
class CompactionOutput:
    paths: tuple[str, ...]
    rows_read: int  # data rows read (each matched to its input file)
    digest_kept: ContentDigest  # the delete-applied input, observed while writing (the caller reads the outputs back)
    lineage_kept: ContentDigest | None = None  # the same with _row_id and _last_updated_sequence_number (v3)

    @property
    def rows_deleted(self) -> int:
        return self.rows_read - self.digest_kept.rows


def equality_fields(schema: Schema, ids: tuple[int, ...]) -> list[Any]:
    """The table's fields with the equality ids ``ids``; ActionRefused for a missing or nested one."""
    fields = []
    for field_id in ids:
        try:
            field = schema.find_field(field_id)
        except ValueError:
            raise ActionRefused("equality_field_missing",
                                f"equality delete field id {field_id} is not in the table's schema") from None
        if field not in schema.fields or not isinstance(field.field_type, PrimitiveType):
            raise ActionRefused("unsupported_equality_field",
                                f"equality deletes on {field.name!r} (a nested or non-primitive field) are not "
                                "supported yet")
        fields.append(field)
    return fields
