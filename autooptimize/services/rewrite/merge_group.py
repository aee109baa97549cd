"""One merge, sort, z-order or respec group on each engine (services/rewrite/engine.py): what it needs
(:func:`prepare_group`), all of an action's groups as the tasks of one Spark job (:func:`rewrite_in_one_job`,
engine ``spark``), and one group in the worker (``local``) or as its own Spark SQL job (``spark_sql``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table

from autooptimize.arrow.sort import sortable
from autooptimize.domain.actions import ActionRequest, Digest, Engine, GroupResult, Hooks
from autooptimize.domain.profile import add_seconds, phase
from autooptimize.engines.types import SPARK, engine_for
from autooptimize.errors import ActionRefused, VerificationFailed
from autooptimize.iceberg.commit import data_file_from_footer
from autooptimize.iceberg.fileio import table_is_local
from autooptimize.services import evolution
from autooptimize.services.evolution import encode_partition
from autooptimize.services.rewrite import lineage
from autooptimize.services.rewrite.engine import choose_engine
from autooptimize.services.rewrite.evolution import local_rewrite
from autooptimize.services.rewrite.kind import Unit, group_result
from autooptimize.services.rewrite.sort import check_sorted_group, sort_spec, spark_sort, zorder_spec
from autooptimize.services.rewrite.verify import (
    as_digest,
    inputs_digest,
    output_digest,
    read_back_digest,
    verify_group,
)
from autooptimize.services.zorder import group_keys
from spark_actors import group_tasks
from spark_actors.action_job import TableContext, run_action_job
from spark_actors.rewrite import rewrite_group_sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeGroup:
    """One merge group ready to rewrite: its inputs, the engine chosen and its sort or z-order keys."""

    unit: Unit
    directory: str
    by_path: dict[str, Any]
    inputs: list[str]
    engine: Engine
    respec: bool
    keys: list[Any] | None  # sort keys (SortKey)
    zkeys: list[Any] | None  # z-order keys (ZKey)
    columns: list[Any] | None  # the sort columns (checked on the outputs)
    sort_order_id: int | None


def prepare_group(table: Table, unit: Unit, directory: str, request: ActionRequest) -> MergeGroup:
    """What the group's rewrite needs, and the engine that rewrites it (or ActionRefused)."""
    pf, group = unit.partition, unit.work
    by_path = {f.path: f for f in pf.data_files}
    inputs = [f.path for f in group.files]
    order = sort_spec(table, request)
    zorder = zorder_spec(table, request)
    respec = pf.spec_id != table.spec().spec_id and evolution.wants_respec(request.options)
    with_ids = {evolution.has_field_ids(table, p) for p in inputs} if evolution.may_hold_files_without_ids(
        table) else {True}  # without a name mapping every file has field ids: no footer is read here
    if len(with_ids) != 1:
        raise VerificationFailed(f"group {directory} mixes files with and without field ids")
    field_ids = with_ids.pop()
    # Spark's own Parquet IO reaches only local files (no Hadoop S3 filesystem here)
    spark_can = engine_for(table.schema(), field_ids=field_ids) == SPARK and table_is_local(table)
    columns = order[0] if order else None
    keys = spark_sort(columns)
    ordered = order is not None or zorder is not None
    # a z-order's z-value is a Spark expression (spark_actors/zorder.py) or numpy (autooptimize/arrow/zorder.py)
    arrow_sortable = zorder is not None or sortable([f.name for f in table.schema().fields], keys)
    zkeys = group_keys(table, [by_path[p].data_file for p in inputs], zorder) if zorder else None
    if lineage.keeps_lineage(table):  # v3: only the delete-applying pyarrow rewrite carries row lineage
        lineage.refuse_unkept(request, ordered=ordered, respec=respec)
        spark_can = False
    engine = choose_engine(request, spark_can=spark_can, ordered=ordered, arrow_sortable=arrow_sortable)
    if engine == Engine.SPARK_SQL and not spark_can and ordered:
        raise ActionRefused(f"{request.kind}_not_supported",
                            f"this {request.kind} needs Spark's own sort (NULLS FIRST and LAST mixed, or a "
                            "nested key), and this group has types or files that only the pyarrow path "
                            "rewrites faithfully, or lives where Spark cannot read; merge it instead")
    if respec and engine == Engine.SPARK_SQL:
        engine = Engine.SPARK  # a respec partitions rows with pyiceberg's transforms (pyarrow path)
    return MergeGroup(unit, directory, by_path, inputs, engine, respec, keys, zkeys, columns,
                  order[1] if order else None)


def rewrite_in_one_job(spark: Any, table: Table, units: list[Unit], directories: list[str], codec: str,
                   hooks: Hooks, request: ActionRequest, tag: str | None = None) -> list[GroupResult]:
    """Every group of the action: those of the ``spark`` engine as the tasks of one Spark job on the
    executors (spark_actors/action_job.py), verified here from what the tasks return; any other
    (a sort only Spark SQL can do) after it, one by one."""
    prepared = [prepare_group(table, u, d, request) for u, d in zip(units, directories, strict=True)]
    on_job = [g for g in prepared if g.engine == Engine.SPARK]
    if spark is None and any(g.engine != Engine.LOCAL for g in prepared):
        raise without_spark(request)
    results: dict[int, GroupResult] = {}
    if on_job:
        calls = []
        for g in on_job:
            if lineage.keeps_lineage(table):  # v3: its deletion vectors applied, its row lineage kept
                calls.append((group_tasks.compact_group, lineage.job_args(g, codec)[0]))
                continue
            pf = g.unit.partition
            spec_id = table.spec().spec_id if g.respec else None
            calls.append((group_tasks.rewrite_group,
                          ([g.by_path[p].data_file for p in g.inputs], g.directory, g.unit.work.files_out, codec,
                           spec_id, None if g.respec else (pf.spec_id, pf.record), g.keys, g.zkeys,
                           g.sort_order_id)))
        with phase("action.spark_job"):
            job = run_action_job(spark, TableContext.of(table), calls, tag=tag)
        log.info("action %s: %d group(s) in one Spark job, %.2f s, on %d executor(s)", request.action_id,
                 len(calls), job.seconds, len(job.executors))
        record_task_seconds(job)
        for g, outcome in zip(on_job, job.outcomes, strict=True):
            if outcome.error is not None:
                raise outcome.error
            results[id(g)] = (lineage.verify_lineage_written(table, g, outcome.value, hooks, outcome.executor, codec)
                              if lineage.keeps_lineage(table)
                              else verify_written(table, g, outcome.value, hooks, outcome.executor))
    for g in prepared:
        if id(g) not in results:
            results[id(g)] = rewrite_one(spark, table, g, codec, hooks)
    return [results[id(g)] for g in prepared]


def verify_written(table: Table, g: MergeGroup, written: Any, hooks: Hooks, executor: str) -> GroupResult:
    """The group's record once the figures an executor sent back pass the verify ladder."""
    pf = g.unit.partition
    paths = list(written.paths)
    digest_in = Digest(int(written.rows_in), str(written.checksum_in))
    digest_out = Digest(int(written.rows_out), str(written.checksum_out))
    if hooks.after_write:  # a test touched the outputs after the executor read them: read them again
        digest_out = read_back_digest(hooks, paths, lambda: output_digest(table, paths))
    outputs = list(written.data_files)
    verify_group(g.directory, reader="pyiceberg", files_in=len(g.inputs),
                 metadata_rows=sum(g.by_path[p].record_count for p in g.inputs), rows_read=digest_in.rows,
                 expected_out=digest_in, digest_out=digest_out,
                 footer_rows=lambda: sum(int(o.record_count) for o in outputs))
    check_sorted_group(table, outputs, g.columns)
    encoded = None
    if g.respec:
        spec = table.spec()
        encoded = tuple((int(sid), tuple(encode_partition(spec, table, record)))
                        for sid, record in written.partitions)
    return group_result(pf, g.inputs, sum(g.by_path[p].size for p in g.inputs), paths, outputs, digest_in.rows,
                        digest_in.checksum, digest_out, engine=Engine.SPARK.value, output_partitions=encoded,
                        sort_order_id=g.sort_order_id, data_files=tuple(outputs), executor=executor)


def without_spark(request: ActionRequest) -> ActionRefused:
    """A group that needs Spark (a sort only Spark's own sort can do) in an action without a session."""
    return ActionRefused(f"{request.kind}_needs_spark",
                         f"this {request.kind} needs Spark (NULLS FIRST and LAST mixed, or a nested sort key), "
                         f"and the {request.engine} engine runs without a Spark session; use the spark engine "
                         "or merge it instead")


def rewrite_one(spark: Any, table: Table, g: MergeGroup, codec: str, hooks: Hooks) -> GroupResult:
    pf, group, inputs, by_path, directory = g.unit.partition, g.unit.work, g.inputs, g.by_path, g.directory
    if g.engine == Engine.LOCAL and lineage.keeps_lineage(table):
        return lineage.rewrite_local(table, g, codec, hooks)
    if g.engine == Engine.LOCAL:
        return local_rewrite(table, pf, inputs, directory, group.files_out, codec, by_path, hooks, g.respec,
                             sort=g.keys, sort_order_id=g.sort_order_id, zorder=g.zkeys,
                             check_sorted=(lambda outputs: check_sorted_group(table, outputs, g.columns))
                             if g.columns else None)
    by_id = inputs_digest(table, inputs)  # pyarrow reads the inputs while Spark rewrites them
    with phase("group.spark_job"):
        result = rewrite_group_sql(spark, table.schema(), inputs, directory, group.files_out, codec,
                               sort=g.keys, io=table.io, zorder=g.zkeys)
    paths = list(result.paths)
    digest_in = as_digest(result.digest_in)
    with phase("group.read_back"):
        digest_out = read_back_digest(hooks, paths, lambda: output_digest(table, paths))
    sort_order_id = g.sort_order_id
    outputs: list[Any] = []

    def footer_rows() -> int:
        with phase("group.footers"):
            outputs.extend(data_file_from_footer(table, p, pf.spec_id, pf.record, sort_order_id) for p in paths)
        return sum(int(o.record_count) for o in outputs)

    with phase("group.inputs_by_id_wait"):
        inputs_by_id = by_id.result()
    verify_group(directory, reader="Spark", files_in=len(inputs),
                 metadata_rows=sum(by_path[p].record_count for p in inputs), rows_read=digest_in.rows,
                 expected_out=digest_in, digest_out=digest_out, footer_rows=footer_rows,
                 inputs_by_id=inputs_by_id)
    check_sorted_group(table, outputs, g.columns)
    return group_result(pf, inputs, sum(by_path[p].size for p in inputs), paths, outputs, digest_in.rows,
                        digest_in.checksum, digest_out, engine=Engine.SPARK_SQL.value,
                        sort_order_id=sort_order_id)


def record_task_seconds(job: Any) -> None:
    """The tasks' own phases, summed over the job's tasks, in the action's profile (``task.*``), and the
    job's own time before its first task and after its last (``job.*``)."""
    for name in ("to_first_task", "after_last_task"):
        if name in job.timings:
            add_seconds(f"job.{name}", job.timings[name])
    for outcome in job.outcomes:
        add_seconds("task.wall", outcome.seconds)
        add_seconds("task.cpu", outcome.cpu)
        for name, seconds in (getattr(outcome.value, "seconds", None) or {}).items():
            add_seconds(f"task.{name}", seconds)
