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

from autooptimize.arrow.deletes import compact_group_arrow
from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest, Digest, Engine, GroupResult, Hooks
from autooptimize.domain.entropy import EntropyStats
from autooptimize.engines.deletes import SequencedFile
from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg import paths
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    commit_replace,
    data_file_from_footer,
)
from autooptimize.iceberg.commits import CommitStats
from autooptimize.iceberg.fileio import table_is_local
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.staging import StagedRemoval
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
from autooptimize.services.evolution import has_field_ids, may_hold_files_without_ids
from autooptimize.services.rewrite import lineage
from autooptimize.services.rewrite.engine import choose_engine
from autooptimize.services.rewrite.kind import (
    CheckpointWriter,
    Committed,
    Planned,
    Unit,
    commit_facts,
    group_result,
    live_inputs,
)
from autooptimize.services.rewrite.lifecycle import run_rewrite
from autooptimize.services.rewrite.merge_group import record_task_seconds
from autooptimize.services.rewrite.verify import as_digest, output_digest, read_back_digest, verify_group
from spark_actors import group_tasks
from spark_actors.action_job import TableContext, run_action_job
from spark_actors.deletes import compact_group_sql


def _mse(sizes: list[int], target: int) -> float:
    return EntropyStats.from_sizes(sizes, target).mse


class CompactKind:
    """One group per partition: the data files a live delete file applies to, rewritten with the deletes."""

    nothing_reason = "no_delete_files"
    rewrite_on_resume_conflict = True  # inputs or applied deletes changed: rewrite from the current table

    def plan(self, table: Table, request: ActionRequest, spark: Any) -> Planned | None:
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
        if not may_hold_files_without_ids(table):  # no name mapping: every file has ids, no footer is read
            return
        for path in (f.path for u in planned.units for f in u.work.inputs):
            if not has_field_ids(table, path):
                raise ActionRefused(
                    "files_without_field_ids",
                    f"input {path} has no Parquet field ids (added by name mapping); not supported yet",
                )

    def concurrency(self, request: ActionRequest) -> int:
        return 1  # one partition after the other

    def rewrite(self, spark: Any, table: Table, unit: Unit, directory: str, codec: str, hooks: Hooks,
                request: ActionRequest) -> GroupResult:
        """One partition in this process (``local``) or as its own Spark SQL job (``spark_sql``, file://);
        under ``spark`` through :meth:`rewrite_action`."""
        plan: CompactionPlan = unit.work
        deletes = _deletes(plan)
        # Spark SQL's job reads Parquet delete files only and writes no row lineage: deletion vectors and v3
        # tables take the pyarrow path (on the executors, or here)
        spark_can = table_is_local(table) and not lineage.keeps_lineage(table) and not any(
            d.content_offset is not None for d in deletes)
        engine = choose_engine(request, spark_can=spark_can)
        if engine == Engine.SPARK:
            return self.rewrite_action(spark, table, [unit], [directory], codec, hooks, request)[0]
        if engine == Engine.SPARK_SQL:
            data = [SequencedFile(f.path, sequence_number(f)) for f in plan.inputs]
            # below ~1M delete rows (tens of MB as file numbers, positions and keys) a broadcast beats a shuffle
            broadcast = sum(d.record_count for d in plan.deletes) <= BROADCAST_DELETE_ROWS
            result = compact_group_sql(spark, table.schema(), data, deletes, directory, plan.files_out, codec, broadcast)
        else:
            result = compact_group_arrow(table, *_job_args(plan, deletes, directory, codec))
        digest_out = read_back_digest(hooks, list(result.paths), lambda: output_digest(table, list(result.paths)))
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

        if lineage.keeps_lineage(table):
            lineage.verify_lineage(table, directory, list(result.paths), result.lineage_kept)
        return _verified(plan, deletes, directory, "Spark" if engine == Engine.SPARK_SQL else "pyarrow",
                         result.rows_read, result.rows_deleted, as_digest(result.digest_kept), digest_out,
                         footer_rows, outputs, engine)

    def rewrite_action(self, spark: Any, table: Table, units: list[Unit], directories: list[str], codec: str,
                       hooks: Hooks, request: ActionRequest, tag: str | None = None) -> list[GroupResult]:
        """Every partition's compaction as a task of one Spark job on the executors, verified here from
        the figures the tasks return (spark_actors/group_tasks.compact_group)."""
        plans: list[CompactionPlan] = [u.work for u in units]
        deletes = [_deletes(plan) for plan in plans]
        calls = [(group_tasks.compact_group, _job_args(plan, d, directory, codec))
                 for plan, d, directory in zip(plans, deletes, directories, strict=True)]
        job = run_action_job(spark, TableContext.of(table), calls, tag=tag)
        record_task_seconds(job)
        results = []
        for plan, d, directory, outcome in zip(plans, deletes, directories, job.outcomes, strict=True):
            if outcome.error is not None:
                raise outcome.error
            written = outcome.value
            if lineage.keeps_lineage(table):
                lineage.written_lineage(table, directory, written, hooks)
            digest_out = Digest(int(written.rows_out), str(written.checksum_out))
            if hooks.after_write:  # a test touched the outputs after the executor read them: read them again
                digest_out = read_back_digest(hooks, list(written.paths),
                                              lambda w=written: output_digest(table, list(w.paths)))
            outputs = list(written.data_files)
            results.append(_verified(plan, d, directory, "pyarrow", int(written.rows_in), int(written.rows_deleted),
                                     Digest(int(written.rows_in) - int(written.rows_deleted), str(written.checksum_in)),
                                     digest_out, lambda o=outputs: sum(int(f.record_count) for f in o), outputs,
                                     Engine.SPARK, data_files=tuple(outputs), executor=outcome.executor))
        return results

    def removals(self, table: Table, planned: Planned) -> list[Any] | None:
        return None  # not written ahead yet: its delete files' entries are chosen at commit time

    def commit(self, table: Table, request: ActionRequest, groups: list[GroupResult], part: int | None = None,
               parts: int | None = None, ahead: StagedRemoval | None = None) -> Committed:
        """Commit the outputs; the plan facts name the delete files it removed and the rows deleted."""
        live, live_deletes = live_inputs(table, groups)
        inputs = [p for g in groups for p in g.inputs]
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
            if g.data_files is not None:  # read from the footers on the executors that wrote them
                for f in g.data_files:
                    f.spec_id = first.spec_id
                added.extend(g.data_files)
                continue
            added.extend(data_file_from_footer(table, p, first.spec_id, first.partition) for p in g.outputs)
        if sum(g.rows_out for g in groups) != sum(int(f.record_count) for f in added):
            raise VerificationFailed("the checkpointed outputs do not hold the verified number of rows")
        properties = {ACTION_ID_PROPERTY: request.action_id, ACTION_KIND_PROPERTY: KIND}
        removed = [live[p].data_file for p in inputs] + [live_deletes[p].data_file for p in dropped]
        allowed = frozenset(p for g in groups for p in g.scope or ())
        stats = CommitStats()
        snapshot = commit_replace(table, removed, added, properties, allowed_deletes=allowed, allow_no_output=True,
                                  stats=stats, ahead=ahead)
        return Committed(snapshot.snapshot_id, {"delete_files_removed": dropped,
                                                "rows_deleted": sum(g.rows_deleted or 0 for g in groups),
                                                **commit_facts(stats)})


def _deletes(plan: CompactionPlan) -> list[Any]:
    """The plan's delete files with their data sequence numbers (ActionRefused for a malformed one)."""

    deletes = [  # read from its location: a deletion vector is a blob of a Puffin file (its offset)
        SequencedFile(d.location, sequence_number(d), None if is_position(d) else tuple(d.data_file.equality_ids or ()),
                      content_offset(d.data_file) if is_deletion_vector(d.data_file) else None)
        for d in plan.deletes
    ]
    if any(d.equality_ids == () for d in deletes):
        raise ActionRefused("malformed_delete_file", "an equality delete file has no equality field ids")
    return deletes


def _job_args(plan: CompactionPlan, deletes: list[Any], directory: str, codec: str) -> tuple[Any, ...]:
    """The arguments of the pyarrow compaction after the table (autooptimize/arrow/deletes.compact_group_arrow)."""
    with_seq = [(f.data_file, sequence_number(f)) for f in plan.inputs]
    return (with_seq, deletes, directory, plan.files_out, codec, (plan.partition.spec_id, plan.partition.record))


def _verified(plan: CompactionPlan, deletes: list[Any], directory: str, reader: str, rows_read: int,
              rows_deleted: int, expected: Digest, digest_out: Digest, footer_rows: Any, outputs: list[Any],
              engine: Engine, data_files: tuple[Any, ...] | None = None, executor: str | None = None) -> GroupResult:
    """The group's record once rows, deleted rows and digests pass the verify ladder."""
    rows_in = sum(f.record_count for f in plan.inputs)
    equality = any(d.equality_ids is not None for d in deletes)

    def deleted_rows_match() -> None:
        if rows_deleted < plan.position_rows or (not equality and rows_deleted != plan.position_rows):
            raise VerificationFailed(
                f"the rewrite of {directory} removed {rows_deleted} rows but the position deletes alone remove "
                f"{plan.position_rows}" + (" (at least)" if equality else "")
            )

    verify_group(directory, reader=reader, files_in=len(plan.inputs), metadata_rows=rows_in,
                 rows_read=rows_read, expected_out=expected, digest_out=digest_out,
                 footer_rows=footer_rows, rows_deleted=rows_deleted, after_read=deleted_rows_match)
    return group_result(plan.partition, [f.path for f in plan.inputs], plan.bytes_in,
                        [str(o.file_path) for o in outputs], outputs, rows_in, expected.checksum,
                        digest_out, deletes=tuple(d.path for d in plan.deletes),
                        scope=tuple(d.path for d in plan.scope),
                        refs={k: tuple(sorted(v)) for k, v in plan.refs.items()},
                        rows_deleted=rows_deleted, engine=engine.value, data_files=data_files, executor=executor)


def run_compact_deletes(settings: Settings, request: ActionRequest, spark: Any, save_checkpoint: CheckpointWriter,
                        hooks: Hooks | None = None) -> ActionOutcome:
    """Execute (or finish) one delete-compaction action (services/rewrite/lifecycle.run_rewrite)."""
    return run_rewrite(CompactKind(), settings, request, spark, save_checkpoint, hooks)
