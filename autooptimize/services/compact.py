"""Delete compaction (Netflix's "compaction"): fold a partition's row-level deletes into its data files.

This module holds the rules; services/rewrite/compact.py runs the action through the one rewrite
lifecycle (plan → rewrite (Spark applies the deletes) → verify → checkpoint → commit, exactly once).
The plan picks, in one partition, the data files at least one live delete file applies to (Iceberg's rules: a position delete applies to the files it names whose data sequence number is <= its
own; an equality delete to every data file of its partition, or of the table when its spec is
unpartitioned, whose data sequence number is strictly lower). The commit is ONE REPLACE snapshot that
removes those data files, adds the rewritten ones, and removes every delete file known at plan time that
applies to no data file still live afterwards. The outputs get the new snapshot's sequence number, so no
remaining equality delete applies to them (they were applied already) and no position delete names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.table import Table

from autooptimize.errors import ActionRefused
from autooptimize.iceberg.deletes import POS_FILE_PATH_ID
from autooptimize.iceberg.files import LiveFile, PartitionFiles
from autooptimize.iceberg.v3 import (
    MalformedDeleteFile,
    content_offset,
    is_deletion_vector,
    referenced_data_file,
    vector_positions,
)

KIND = "compact_deletes"
BROADCAST_DELETE_ROWS = 1_000_000


def sequence_number(f: LiveFile) -> int:
    """The file's data sequence number."""
    # v1 files upgraded to v2 carry sequence number 0
    return int(f.sequence_number or 0)


def is_position(f: LiveFile) -> bool:
    """Whether ``f`` is a position delete file."""
    return f.data_file.content == DataFileContent.POSITION_DELETES


def _read_position_deletes(table: Table, delete_file: LiveFile) -> pa.Table:
    """``(file_path, pos)`` of a position delete file or a deletion vector (Iceberg v3)."""
    df = delete_file.data_file
    if is_deletion_vector(df):
        try:
            referenced, positions = vector_positions(table.io, delete_file.location, content_offset(df),
                                                     referenced_data_file(df))
        except MalformedDeleteFile as exc:
            raise ActionRefused("malformed_delete_file", str(exc)) from None
        return pa.table({"file_path": pa.array([referenced] * len(positions), pa.string()),
                         "pos": pa.array(positions, pa.int64())})
    if df.file_format != FileFormat.PARQUET:
        raise ActionRefused("unsupported_delete_format",
                            f"position delete file {delete_file.location} is {df.file_format.value}; "
                            "only Parquet delete files and Puffin deletion vectors are read")
    with table.io.new_input(delete_file.location).open() as stream:
        data = pq.read_table(stream, columns=["file_path", "pos"])
    if data.column("file_path").null_count or data.column("pos").null_count:
        raise ActionRefused("malformed_delete_file", f"position delete file {delete_file.path} has null values")
    return data


def position_references(table: Table, delete_file: LiveFile) -> frozenset[str]:
    """The data file paths a position delete file names (its ``file_path`` column)."""
    return frozenset(str(p) for p in pc.unique(_read_position_deletes(table, delete_file).column("file_path"))
                     .to_pylist())


def count_position_deletes(table: Table, deletes: list[LiveFile], inputs: list[LiveFile]) -> int:
    """Distinct (file, position) pairs of ``deletes`` that delete a row of ``inputs`` (sequence rules applied).

    Read with pyarrow, apart from the Spark job: the compaction must delete exactly this many rows when
    no equality delete applies, and at least this many otherwise.
    """
    pairs: set[tuple[str, int]] = set()
    for d in (d for d in deletes if is_position(d)):
        rows = {f.path: f.record_count for f in inputs if sequence_number(d) >= sequence_number(f)}
        data = _read_position_deletes(table, d)
        named = data.filter(pc.is_in(data.column("file_path"), pa.array(list(rows), pa.string())))
        for path, pos in zip(named.column("file_path").to_pylist(), named.column("pos").to_pylist(), strict=True):
            if pos < rows[path]:
                pairs.add((path, pos))
    return len(pairs)


def applies(delete: LiveFile, data: LiveFile, refs: dict[str, frozenset[str]]) -> bool:
    """Whether ``delete`` (already known to be in ``data``'s scope) applies to ``data``."""
    if is_position(delete):
        return data.path in refs[delete.path] and sequence_number(delete) >= sequence_number(data)
    return sequence_number(delete) > sequence_number(data)


@dataclass
class CompactionPlan:
    """What one partition's delete compaction rewrites and which delete files it applies."""

    partition: PartitionFiles
    inputs: list[LiveFile]
    deletes: list[LiveFile]  # delete files applying to at least one input
    scope: list[LiveFile]  # every delete file in the partition's scope at plan time
    refs: dict[str, frozenset[str]]  # position delete file → data file paths it names
    files_out: int
    position_rows: int  # distinct input rows the position deletes remove (counted without Spark)

    @property
    def bytes_in(self) -> int:
        return sum(f.size for f in self.inputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_id": self.partition.spec_id,
            "partition": self.partition.key,
            "partition_values": self.partition.values,
            "files_in": len(self.inputs),
            "files_out": self.files_out,
            "bytes_rewritten": self.bytes_in,
            "delete_files_applied": len(self.deletes),
            "delete_files_in_scope": len(self.scope),
            "position_deleted_rows": self.position_rows,
            "groups": [{"files": [f.path for f in self.inputs], "bytes_in": self.bytes_in,
                        "files_out": self.files_out}],
        }


def scope_deletes(parts: dict[tuple[int, str], PartitionFiles], pf: PartitionFiles, table: Table) -> list[LiveFile]:
    """Delete files that may apply to ``pf``'s data: its own, and equality deletes of unpartitioned specs."""
    specs = table.specs()
    found = list(pf.delete_files)
    for (spec_id, _), other in sorted(parts.items()):
        if other is pf or specs[spec_id].fields:
            continue
        found += [d for d in other.delete_files if d.data_file.content == DataFileContent.EQUALITY_DELETES]
    return found


def _may_name(delete_file: LiveFile, paths: set[str]) -> bool:
    """Whether a position delete file's ``file_path`` bounds (possibly truncated) admit one of ``paths``."""
    if is_deletion_vector(delete_file.data_file):
        return referenced_data_file(delete_file.data_file) in paths
    lower = (delete_file.data_file.lower_bounds or {}).get(POS_FILE_PATH_ID)
    upper = (delete_file.data_file.upper_bounds or {}).get(POS_FILE_PATH_ID)
    if lower is None or upper is None:
        return True
    return any(lower <= p.encode() <= upper for p in paths)


def _cross_partition(path: str, other: str) -> ActionRefused:
    return ActionRefused(
        "position_delete_outside_partition",
        f"position delete file {path} names data file {other} of another partition. The Iceberg spec applies a "
        "position delete only within its own partition but readers differ (pyiceberg applies it anyway), so "
        "rewriting would pick one reading; fix or remove that delete file first",
    )


def plan_compaction(table: Table, parts: dict[tuple[int, str], PartitionFiles], pf: PartitionFiles,
                    target_file_size: int, bytes_per_row: float | None = None) -> CompactionPlan | str:
    """The compaction plan of ``pf``, or the reason there is nothing to do.

    Raises ActionRefused when a position delete file names a live data file of another partition (in
    either direction): that is outside the spec and readers disagree on what it means.
    """
    scope = scope_deletes(parts, pf, table)
    if not scope:
        return "no_delete_files"
    refs = {d.path: position_references(table, d) for d in scope if is_position(d)}
    home = {f.path for f in pf.data_files}
    elsewhere = {f.path for other in parts.values() if other is not pf for f in other.data_files}
    for path, named in refs.items():
        if named & elsewhere:
            raise _cross_partition(path, sorted(named & elsewhere)[0])
    for other in parts.values():
        for d in other.delete_files if other is not pf else []:
            if is_position(d) and _may_name(d, home):
                named = position_references(table, d) & home
                if named:
                    raise _cross_partition(d.path, sorted(named)[0])
    inputs = [f for f in pf.data_files if any(applies(d, f, refs) for d in scope)]
    if not inputs:
        return "no_applicable_deletes"
    deletes = [d for d in scope if any(applies(d, f, refs) for f in inputs)]
    # output size: the rows kept times the bytes per row the table's rewrites measured (services/sizing);
    # raw input bytes before the first rewrite (small files compress far worse than merged ones)
    deleted = count_position_deletes(table, deletes, inputs)
    rows_kept = max(0, sum(f.record_count for f in inputs) - deleted)
    estimate = rows_kept * bytes_per_row if bytes_per_row else sum(f.size for f in inputs)
    files_out = max(1, round(estimate / target_file_size))
    return CompactionPlan(pf, inputs, deletes, scope, refs, files_out, deleted)


def compaction_refusal(table: Table, pf: PartitionFiles) -> ActionRefused | None:
    if pf.spec_id != table.spec().spec_id:
        return ActionRefused(
            "older_spec",
            f"partition {pf.human} belongs to partition spec {pf.spec_id}, not the current spec "
            f"{table.spec().spec_id}; rewriting older specs is not supported yet",
        )
    return None
