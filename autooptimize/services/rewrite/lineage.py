"""Rewriting a format v3 table: row lineage kept and deletion vectors folded in (Iceberg spec, "Row
Lineage", "Deletion Vectors").

A v3 merge group goes through the delete-applying pyarrow rewrite (autooptimize/arrow/deletes.py) with
the deletion vectors of its inputs: under the ``spark`` engine as a task of the action's Spark job
(spark_actors/group_tasks.compact_group), under ``local`` in the worker. It drops the vectors' rows,
writes every kept row's ``_row_id`` and ``_last_updated_sequence_number`` materialised, and the commit
removes each applied vector together with its data file. ``spark_sql`` (Spark's own Parquet IO) carries
no lineage: a v3 group never takes it. A partition holding any other delete file (an equality delete,
or a v2 position delete file left from before an upgrade) is not merged: compact_deletes folds those
first. Sort, z-order and moving files to another spec do not carry lineage yet and are refused on v3
with a reason that says so, before anything is written.

The lineage check: the outputs read back by field id with both lineage columns must hold exactly the
(row, ``_row_id``, ``_last_updated_sequence_number``) triples the writer kept. On the executor the task
reads them back and returns both digests (GroupWritten.lineage_in/out); in the worker (``local``, or a
test's ``after_write`` hook) :func:`verify_lineage` reads them.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from autooptimize.arrow.deletes import compact_group_arrow
from autooptimize.domain.actions import ActionRequest, Digest, Engine, GroupResult, Hooks
from autooptimize.engines.deletes import SequencedFile
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.checksum import parquet_digest
from autooptimize.iceberg.commit import data_file_from_footer
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


def refuse_unkept(request: ActionRequest, *, ordered: bool, respec: bool) -> None:
    """ActionRefused (v3_lineage_not_supported) for a v3 rewrite that would not carry row lineage."""
    if ordered or respec:
        raise ActionRefused(
            "v3_lineage_not_supported",
            f"{'moving files to the current partition spec' if respec else request.kind} does not carry row "
            f"lineage (_row_id, _last_updated_sequence_number) on format v3 tables yet; merge or compact_deletes "
            "keep it",
        )


def vectors_of(pf: PartitionFiles, inputs: list[LiveFile]) -> list[LiveFile]:
    """The deletion vectors of ``pf`` that apply to ``inputs`` (same file, data sequence number not older)."""
    seq = {f.location: sequence_number(f) for f in inputs}
    return [d for d in pf.delete_files if is_deletion_vector(d.data_file)
            and referenced_data_file(d.data_file) in seq
            and sequence_number(d) >= seq[str(referenced_data_file(d.data_file))]]


def job_args(g: Any, codec: str) -> tuple[tuple[Any, ...], list[LiveFile]]:
    """The arguments of a v3 merge group's delete-applying rewrite after the table
    (autooptimize/arrow/deletes.compact_group_arrow, group_tasks.compact_group), and the vectors applied."""

    pf = g.unit.partition
    files = [g.by_path[p] for p in g.inputs]
    vectors = vectors_of(pf, files)
    deletes = [SequencedFile(d.location, sequence_number(d), None, content_offset(d.data_file)) for d in vectors]
    return ([(f.data_file, sequence_number(f)) for f in files], deletes, g.directory, g.unit.work.files_out, codec,
            (pf.spec_id, pf.record)), vectors


def verify_lineage(table: Table, where: str, paths: list[str], expected: Any) -> None:
    """VerificationFailed unless the outputs, read back by field id with their row lineage columns, hold
    exactly the (row, _row_id, _last_updated_sequence_number) triples the rewrite observed."""
    found = parquet_digest(with_lineage(table.schema()), paths, table.io) if expected is not None else None
    lineage_match(where, expected, found)


def lineage_match(where: str, expected: Any, found: Any) -> None:
    """VerificationFailed unless ``found`` (rows, checksum with lineage) equals ``expected``."""
    if expected is None or found is None:
        raise VerificationFailed(f"the rewrite of {where} on a v3 table did not carry row lineage")
    if (int(found.rows), str(found.checksum)) != (int(expected.rows), str(expected.checksum)):
        raise VerificationFailed(f"row lineage of {where} changed: {expected.rows} rows {expected.checksum} → "
                                 f"{found.rows} rows {found.checksum}")


def written_lineage(table: Table, where: str, written: Any, hooks: Hooks) -> None:
    """The lineage check of a group an executor wrote (GroupWritten): from its figures, or read here again
    when a test touched the outputs after the executor read them."""
    expected = Digest(*written.lineage_in) if written.lineage_in is not None else None
    if hooks.after_write:
        verify_lineage(table, where, list(written.paths), expected)
        return
    lineage_match(where, expected, Digest(*written.lineage_out) if written.lineage_out is not None else None)


def rewrite_local(table: Table, g: Any, codec: str, hooks: Hooks) -> GroupResult:
    """One v3 merge group in the worker (``local``), its deletion vectors applied and its lineage kept."""
    pf = g.unit.partition
    args, vectors = job_args(g, codec)
    result = compact_group_arrow(table, *args)
    verify_lineage(table, g.directory, list(result.paths), result.lineage_kept)
    digest_out = read_back_digest(hooks, list(result.paths), lambda: output_digest(table, list(result.paths)))
    outputs: list[Any] = []

    def footer_rows() -> int:
        outputs.extend(data_file_from_footer(table, p, pf.spec_id, pf.record) for p in result.paths)
        return sum(int(o.record_count) for o in outputs)

    return _verified(table, g, vectors, "pyarrow", result.rows_read, result.rows_deleted,
                     as_digest(result.digest_kept), digest_out, footer_rows, outputs, Engine.LOCAL, None, None)


def verify_lineage_written(table: Table, g: Any, written: Any, hooks: Hooks, executor: str, codec: str) -> GroupResult:
    """A v3 merge group an executor wrote (group_tasks.compact_group), verified from its figures."""
    _, vectors = job_args(g, codec)
    written_lineage(table, g.directory, written, hooks)
    digest_out = Digest(int(written.rows_out), str(written.checksum_out))
    if hooks.after_write:  # a test touched the outputs after the executor read them: read them again
        digest_out = read_back_digest(hooks, list(written.paths),
                                      lambda: output_digest(table, list(written.paths)))
    outputs = list(written.data_files)
    rows_deleted = int(written.rows_deleted or 0)
    return _verified(table, g, vectors, "pyarrow", int(written.rows_in), rows_deleted,
                     Digest(int(written.rows_in) - rows_deleted, str(written.checksum_in)), digest_out,
                     lambda: sum(int(o.record_count) for o in outputs), outputs, Engine.SPARK, tuple(outputs),
                     executor)


def _verified(table: Table, g: Any, vectors: list[LiveFile], reader: str, rows_read: int, rows_deleted: int,
              expected: Digest, digest_out: Digest, footer_rows: Any, outputs: list[Any], engine: Engine,
              data_files: tuple[Any, ...] | None, executor: str | None) -> GroupResult:
    pf, inputs = g.unit.partition, g.inputs
    rows_in = sum(g.by_path[p].record_count for p in inputs)
    verify_group(g.directory, reader=reader, files_in=len(inputs), metadata_rows=rows_in, rows_read=rows_read,
                 expected_out=expected, digest_out=digest_out, footer_rows=footer_rows, rows_deleted=rows_deleted)
    if any(int(o.record_count) == 0 for o in outputs):
        raise VerificationFailed(f"the rewrite of {g.directory} wrote an empty file")
    return group_result(pf, inputs, sum(g.by_path[p].size for p in inputs), [str(o.file_path) for o in outputs],
                        outputs, rows_in, expected.checksum, digest_out, engine=engine.value,
                        deletes=tuple(d.path for d in vectors), rows_deleted=rows_deleted, data_files=data_files,
                        executor=executor)


def vectors_removed(groups: list[GroupResult], live_deletes: dict[str, LiveFile]) -> list[Any]:
    """The DataFiles of the deletion vectors ``groups`` applied (removed with their data files); ConflictAbort
    when one is no longer live (a newer vector replaced it: the rewrite did not see its deletes)."""
    applied = [p for g in groups for p in g.deletes or ()]
    gone = [p for p in applied if p not in live_deletes]
    if gone:
        raise ConflictAbort(f"deletion vector {gone[0]} the rewrite applied is no longer live")
    return [live_deletes[p].data_file for p in applied]
