"""Merging a format v3 table: row lineage kept and deletion vectors folded in (Iceberg spec, "Row Lineage",
"Deletion Vectors").

A v3 merge group goes through the delete-applying pyarrow job (spark_actors/arrow_deletes.py, run as a
Spark task off ``file://``) with the deletion vectors of its inputs: it drops their rows, writes every
kept row's ``_row_id`` and ``_last_updated_sequence_number`` materialised, and the commit removes each
applied vector together with its data file. A partition holding any other delete file (an equality
delete, or a v2 position delete file left from before an upgrade) is not merged: compact_deletes folds
those first. Sort, z-order and moving files to another spec do not carry lineage yet and are refused
on v3 with a reason that says so, before anything is written.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from autooptimize.domain.actions import Engine, GroupResult, Hooks, MergeRequest
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.checksum import parquet_digest
from autooptimize.iceberg.commit import data_file_from_footer
from autooptimize.iceberg.fileio import is_local
from autooptimize.iceberg.files import LiveFile, PartitionFiles
from autooptimize.iceberg.v3 import content_offset, is_deletion_vector, referenced_data_file, with_lineage
from autooptimize.services.compact import sequence_number
from autooptimize.services.rewrite.kind import group_result
from autooptimize.services.rewrite.verify import as_digest, output_digest, read_back_digest, verify_group


def keeps_lineage(table: Table) -> bool:
    """Whether rewrites of ``table`` must carry row lineage (format v3 and later)."""
    return table.metadata.format_version >= 3


def merges_with_vectors(table: Table, pf: PartitionFiles) -> bool:
    """Whether a merge may rewrite ``pf`` although it has delete files: a v3 table whose every live delete
    file in the partition is a deletion vector."""
    return keeps_lineage(table) and all(is_deletion_vector(d.data_file) for d in pf.delete_files)


def vectors_of(pf: PartitionFiles, inputs: list[LiveFile]) -> list[LiveFile]:
    """The deletion vectors of ``pf`` that apply to ``inputs`` (same file, data sequence number not older)."""
    seq = {f.location: sequence_number(f) for f in inputs}
    return [d for d in pf.delete_files if is_deletion_vector(d.data_file)
            and referenced_data_file(d.data_file) in seq
            and sequence_number(d) >= seq[str(referenced_data_file(d.data_file))]]


def rewrite_v3_group(spark: Any, table: Table, pf: PartitionFiles, inputs: list[str], directory: str,
                     files_out: int, codec: str, hooks: Hooks, request: MergeRequest, *, ordered: bool,
                     respec: bool) -> GroupResult:
    """Rewrite one merge group of a v3 table, its deletion vectors applied and its row lineage kept."""
    if ordered or respec:
        raise ActionRefused(
            "v3_lineage_not_supported",
            f"{'moving files to the current partition spec' if respec else request.kind} does not carry row "
            f"lineage (_row_id, _last_updated_sequence_number) on format v3 tables yet; merge or compact_deletes "
            "keep it",
        )
    from spark_actors.arrow_deletes import compact_group_arrow
    from spark_actors.arrow_on_spark import run_on_spark
    from spark_actors.deletes import SequencedFile

    by_path = {f.path: f for f in pf.data_files}
    files = [by_path[p] for p in inputs]
    vectors = vectors_of(pf, files)
    deletes = [SequencedFile(d.location, sequence_number(d), None, content_offset(d.data_file)) for d in vectors]
    job_args = ([(f.data_file, sequence_number(f)) for f in files], deletes, directory, files_out, codec,
                (pf.spec_id, pf.record))
    engine = Engine.ARROW if is_local(table) else Engine.ARROW_ON_SPARK
    result = (compact_group_arrow(table, *job_args) if engine == Engine.ARROW
              else run_on_spark(spark, table, compact_group_arrow, *job_args))
    verify_lineage(table, directory, list(result.paths), result.lineage_kept)
    digest_out = read_back_digest(hooks, list(result.paths), lambda: output_digest(table, list(result.paths)))
    rows_in = sum(f.record_count for f in files)
    outputs: list[Any] = []

    def footer_rows() -> int:
        outputs.extend(data_file_from_footer(table, p, pf.spec_id, pf.record) for p in result.paths)
        return sum(int(o.record_count) for o in outputs)

    verify_group(directory, reader="pyarrow", files_in=len(files), metadata_rows=rows_in,
                 rows_read=result.rows_read, expected_out=as_digest(result.digest_kept), digest_out=digest_out,
                 footer_rows=footer_rows, rows_deleted=result.rows_deleted)
    if any(int(o.record_count) == 0 for o in outputs):
        raise VerificationFailed(f"the rewrite of {directory} wrote an empty file")
    return group_result(pf, inputs, sum(f.size for f in files), list(result.paths), outputs, rows_in,
                        result.digest_kept.checksum, digest_out, engine=engine.value,
                        deletes=tuple(d.path for d in vectors), rows_deleted=result.rows_deleted)


def verify_lineage(table: Table, where: str, paths: list[str], expected: Any) -> None:
    """VerificationFailed unless the outputs, read back by field id with their row lineage columns, hold
    exactly the (row, _row_id, _last_updated_sequence_number) triples the rewrite observed."""
    if expected is None:
        raise VerificationFailed(f"the rewrite of {where} on a v3 table did not carry row lineage")
    found = parquet_digest(with_lineage(table.schema()), paths, table.io)
    if (found.rows, found.checksum) != (expected.rows, expected.checksum):
        raise VerificationFailed(f"row lineage of {where} changed: {expected.rows} rows {expected.checksum} → "
                                 f"{found.rows} rows {found.checksum}")


def vectors_removed(groups: list[GroupResult], live_deletes: dict[str, LiveFile]) -> list[Any]:
    """The DataFiles of the deletion vectors ``groups`` applied (removed with their data files); ConflictAbort
    when one is no longer live (a newer vector replaced it: the rewrite did not see its deletes)."""
    applied = [p for g in groups for p in g.deletes or ()]
    gone = [p for p in applied if p not in live_deletes]
    if gone:
        raise ConflictAbort(f"deletion vector {gone[0]} the rewrite applied is no longer live")
    return [live_deletes[p].data_file for p in applied]
