"""The compact_deletes kind: fold a partition's row-level deletes into its data files (the rules are in
services/compact.py), run by the one rewrite lifecycle (services/rewrite/lifecycle.py).

Before committing: rows read == the inputs' metadata row count, rows out == rows read − rows deleted,
and the checksum of the written files == the checksum of the delete-applied input observed in the
same Spark pass. At commit, every input and every applied delete file must still be live, and no
delete file unknown at plan time may apply to an input (else ConflictAbort; nothing is committed and
the output is removed). Concurrent appends are not conflicts.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import Engine, GroupResult, Hooks, MergeOutcome, MergeRequest
from autooptimize.domain.entropy import EntropyStats
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg import paths
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    commit_replace,
    data_file_from_footer,
)
from autooptimize.iceberg.commits import CommitStats
from autooptimize.iceberg.fileio import is_local
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.v3 import content_offset, is_deletion_vector
from autooptimize.services.compact import (
    BROADCAST_DELETE_ROWS,
    KIND,
    CompactionPlan,
    compaction_refusal,
    is_position,
    plan_compaction,
    sequence_number,
)
from autooptimize.services.evolution import has_field_ids
from autooptimize.services.rewrite.engine import choose_engine
from autooptimize.services.rewrite.kind import (
    CheckpointWriter,
    Committed,
    Planned,
    Unit,
    commit_facts,
    group_result,
)
from autooptimize.services.rewrite.lifecycle import run_rewrite
from autooptimize.services.rewrite.lineage import verify_lineage
from autooptimize.services.rewrite.verify import as_digest, output_digest, read_back_digest, verify_group


def _mse(sizes: list[int], target: int) -> float:
    return EntropyStats.from_sizes(sizes, target).mse


class CompactKind:
    """One group per partition: the data files a live delete file applies to, rewritten with the deletes."""

    nothing_reason = "no_delete_files"
    rewrite_on_resume_conflict = True  # inputs or applied deletes changed: rewrite from the current table

    def plan(self, table: Table, request: MergeRequest, spark: Any) -> Planned | None:
        parts = live_partitions(table)
        current = table.spec().spec_id
        if request.partition_key is not None:
            key = (request.spec_id if request.spec_id is not None else current, request.partition_key)
            chosen = [parts[key]] if key in parts else []
        else:
            chosen = [pf for (sid, _), pf in sorted(parts.items()) if sid == current and pf.data_files]
        if not chosen:
            return None
        plans: list[CompactionPlan] = []
        skipped: dict[str, str] = {}
        for pf in chosen:
            problem = compaction_refusal(table, pf)
            if problem is not None:
                if request.partition_key is not None:
                    raise problem
                skipped[pf.key] = problem.reason
                continue
            try:
                plan = plan_compaction(table, parts, pf, request.target_file_size, request.sizing.bytes_per_row)
            except ActionRefused as refused:
                if request.partition_key is not None:
                    raise
                plan = refused.reason
            if isinstance(plan, str):
                skipped[pf.key] = plan
            else:
                plans.append(plan)
        target = request.target_file_size

        def mse_after(groups: list[GroupResult] | None) -> float | None:
            if groups is None:
                return None
            replaced = {p for g in groups for p in g.inputs}
            return _mse([f.size for p in plans for f in p.partition.data_files if f.path not in replaced]
                        + [s for g in groups for s in g.output_sizes], target)

        return Planned(tuple(Unit(p.partition, 0, p) for p in plans), skipped,
                       {"partitions": [p.to_dict() for p in plans], "skipped": skipped},
                       _mse([f.size for p in plans for f in p.partition.data_files], target), mse_after, request)

    def check_writable(self, table: Table, planned: Planned) -> None:
        for path in (f.path for u in planned.units for f in u.work.inputs):
            if not has_field_ids(table, path):
                raise ActionRefused(
                    "files_without_field_ids",
                    f"input {path} has no Parquet field ids (added by name mapping); not supported yet",
                )

    def concurrency(self, request: MergeRequest) -> int:
        return 1  # one partition after the other

    def rewrite(self, spark: Any, table: Table, unit: Unit, directory: str, codec: str, hooks: Hooks,
                request: MergeRequest) -> GroupResult:
        from spark_actors.arrow_deletes import compact_group_arrow
        from spark_actors.arrow_on_spark import run_on_spark
        from spark_actors.deletes import SequencedFile, compact_group

        plan: CompactionPlan = unit.work
        data = [SequencedFile(f.path, sequence_number(f)) for f in plan.inputs]
        deletes = [
            SequencedFile(d.location, sequence_number(d), None if is_position(d) else tuple(d.data_file.equality_ids or ()),
                          content_offset(d.data_file) if is_deletion_vector(d.data_file) else None)
            for d in plan.deletes
        ]
        if any(d.equality_ids == () for d in deletes):
            raise ActionRefused("malformed_delete_file", "an equality delete file has no equality field ids")
        # Spark's job reads Parquet delete files only and writes no row lineage: deletion vectors and v3
        # tables take the pyarrow path
        spark_can = is_local(table) and table.metadata.format_version < 3 and not any(
            d.content_offset is not None for d in deletes)
        engine = choose_engine(request, plan.bytes_in, spark_can=spark_can, local=is_local(table), ordered=False)
        if engine == Engine.SPARK:
            # below ~1M delete rows (tens of MB as file numbers, positions and keys) a broadcast beats a shuffle
            broadcast = sum(d.record_count for d in plan.deletes) <= BROADCAST_DELETE_ROWS
            result = compact_group(spark, table.schema(), data, deletes, directory, plan.files_out, codec, broadcast)
        else:
            with_seq = [(f.data_file, sequence_number(f)) for f in plan.inputs]
            job_args = (with_seq, deletes, directory, plan.files_out, codec,
                        (plan.partition.spec_id, plan.partition.record))
            result = (run_on_spark(spark, table, compact_group_arrow, *job_args) if engine == Engine.ARROW_ON_SPARK
                      else compact_group_arrow(table, *job_args))
        digest_out = read_back_digest(hooks, list(result.paths), lambda: output_digest(table, list(result.paths)))
        rows_in = sum(f.record_count for f in plan.inputs)
        equality = any(d.equality_ids is not None for d in deletes)

        def deleted_rows_match() -> None:
            deleted = result.rows_deleted
            if deleted < plan.position_rows or (not equality and deleted != plan.position_rows):
                raise VerificationFailed(
                    f"the rewrite of {directory} removed {deleted} rows but the position deletes alone remove "
                    f"{plan.position_rows}" + (" (at least)" if equality else "")
                )

        outputs: list[Any] = []

        def footer_rows() -> int:
            written = [data_file_from_footer(table, p, plan.partition.spec_id, plan.partition.record)
                       for p in result.paths]
            # Spark writes an empty file when every row is deleted; the inputs are then removed with no output
            for empty in [o for o in written if int(o.record_count) == 0]:
                paths.delete_file(table.location(), str(empty.file_path), table.io)
            outputs.extend(o for o in written if int(o.record_count) > 0)
            if not outputs:
                paths.delete_tree(table.location(), directory, table.io)
            return sum(int(o.record_count) for o in outputs)

        if table.metadata.format_version >= 3:
            verify_lineage(table, directory, list(result.paths), result.lineage_kept)
        verify_group(directory, reader="Spark" if engine == Engine.SPARK else "pyarrow", files_in=len(plan.inputs), metadata_rows=rows_in,
                     rows_read=result.rows_read, expected_out=as_digest(result.digest_kept), digest_out=digest_out,
                     footer_rows=footer_rows, rows_deleted=result.rows_deleted, after_read=deleted_rows_match)
        return group_result(plan.partition, [f.path for f in plan.inputs], plan.bytes_in,
                            [str(o.file_path) for o in outputs], outputs, rows_in, result.digest_kept.checksum,
                            digest_out, deletes=tuple(d.path for d in plan.deletes),
                            scope=tuple(d.path for d in plan.scope),
                            refs={k: tuple(sorted(v)) for k, v in plan.refs.items()},
                            rows_deleted=result.rows_deleted, engine=engine.value)

    def commit(self, table: Table, request: MergeRequest, groups: list[GroupResult], part: int | None = None,
               parts: int | None = None) -> Committed:
        """Commit the outputs; the plan facts name the delete files it removed and the rows deleted."""
        table.refresh()
        partitions = live_partitions(table)
        live = {f.path: f for pf in partitions.values() for f in pf.data_files}
        live_deletes = {f.path: f for pf in partitions.values() for f in pf.delete_files}
        inputs = [p for g in groups for p in g.inputs]
        gone = [p for p in inputs if p not in live]
        if gone:
            raise ConflictAbort(f"{len(gone)} input file(s) are no longer live, e.g. {gone[0]}")
        unapplied = [p for g in groups for p in g.deletes or () if p not in live_deletes]
        if unapplied:
            raise ConflictAbort(f"delete file {unapplied[0]} the output applied is no longer live")
        replaced = set(inputs)
        remaining = [f for path, f in live.items() if path not in replaced]
        remaining_paths = {f.path for f in remaining}
        specs = table.specs()
        refs = {k: frozenset(v) for g in groups for k, v in (g.refs or {}).items()}
        dropped: list[str] = []
        for path in sorted({p for g in groups for p in g.scope or ()}):
            d = live_deletes.get(path)
            if d is None:
                continue
            if is_position(d):
                still = bool(refs[path] & remaining_paths)
            else:
                unpartitioned = not specs[d.data_file.spec_id].fields
                still = any(
                    sequence_number(f) < sequence_number(d) for f in remaining
                    if unpartitioned or (f.data_file.spec_id, f.data_file.partition) == (d.data_file.spec_id,
                                                                                         d.data_file.partition)
                )
            if not still:
                dropped.append(path)
        added: list[Any] = []
        for g in groups:
            first = live[g.inputs[0]].data_file
            added.extend(data_file_from_footer(table, p, first.spec_id, first.partition) for p in g.outputs)
        if sum(g.rows_out for g in groups) != sum(int(f.record_count) for f in added):
            raise VerificationFailed("the checkpointed outputs do not hold the verified number of rows")
        properties = {ACTION_ID_PROPERTY: request.action_id, ACTION_KIND_PROPERTY: KIND}
        removed = [live[p].data_file for p in inputs] + [live_deletes[p].data_file for p in dropped]
        allowed = frozenset(p for g in groups for p in g.scope or ())
        stats = CommitStats()
        snapshot = commit_replace(table, removed, added, properties, allowed_deletes=allowed, allow_no_output=True,
                                  stats=stats)
        return Committed(snapshot.snapshot_id, {"delete_files_removed": dropped,
                                                "rows_deleted": sum(g.rows_deleted or 0 for g in groups),
                                                **commit_facts(stats)})


def run_compact_deletes(settings: Settings, request: MergeRequest, spark: Any, save_checkpoint: CheckpointWriter,
                        hooks: Hooks | None = None) -> MergeOutcome:
    """Execute (or finish) one delete-compaction action (services/rewrite/lifecycle.run_rewrite)."""
    return run_rewrite(CompactKind(), settings, request, spark, save_checkpoint, hooks)
