"""The merge kind (and sort and zorder, its ordered variants, and respec): which groups of which partitions to
rewrite, the rewrite of one group on Spark (or the pyarrow path), and the commit of verified groups.

The lifecycle around them (exactly once, fencing, checkpoint, cleanup, partial progress) is
services/rewrite/lifecycle.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionOutcome, ActionRequest, Engine, GroupResult, Hooks, Sizing
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.job_groups import cap_groups
from autooptimize.domain.planning import Plan, PlanFile, balance_outputs, plan_bin_pack
from autooptimize.domain.policy import SKIP_RULES, is_live, partition_cold_after
from autooptimize.domain.policy import plan_partition as plan_by_policy
from autooptimize.domain.profile import phase
from autooptimize.engines.types import SPARK, engine_for, unsupported_reason
from autooptimize.errors import ActionRefused
from autooptimize.iceberg.commit import (
    ACTION_ID_PROPERTY,
    ACTION_KIND_PROPERTY,
    ACTION_PART_PROPERTY,
    ACTION_PARTS_PROPERTY,
    commit_replace,
    data_file_from_footer,
)
from autooptimize.iceberg.commits import CommitStats
from autooptimize.iceberg.fileio import table_is_local
from autooptimize.iceberg.files import PartitionFiles, live_partitions
from autooptimize.iceberg.staging import StagedRemoval
from autooptimize.services import evolution
from autooptimize.services.rewrite import lineage
from autooptimize.services.rewrite.evolution import evolution_data_files
from autooptimize.services.rewrite.kind import (
    CheckpointWriter,
    Committed,
    Planned,
    Unit,
    commit_facts,
    live_inputs,
)
from autooptimize.services.rewrite.lifecycle import run_rewrite
from autooptimize.services.rewrite.merge_group import (
    prepare_group,
    rewrite_in_one_job,
    rewrite_one,
    without_spark,
)
from autooptimize.services.rewrite.outputs import action_dir
from autooptimize.services.rewrite.sort import (
    plan_sorted_partition,
    plan_zorder_partition,
    sort_spec,
    zorder_spec,
)
from autooptimize.services.sizing import NO_SIZING, calibrate_arrow, calibrate_spark_sql, calibration_sample
from spark_actors import group_tasks
from spark_actors.action_job import TableContext, run_action_job

log = logging.getLogger(__name__)


def plan_files(pf: PartitionFiles, sizing: Sizing = NO_SIZING) -> list[PlanFile]:
    """The partition's data files as the planners take them (with their sized output estimate)."""
    return [PlanFile(path=f.path, size=f.size, record_count=f.record_count, out_size=sizing.out_size(f.record_count))
            for f in pf.data_files]


def plan_to_dict(pf: PartitionFiles, plan: Plan, rule: str | None = None) -> dict[str, Any]:
    return {
        "rule": rule,
        "spec_id": pf.spec_id,
        "partition": pf.key,
        "partition_human": pf.human,
        "partition_values": pf.values,
        "mse_before": plan.mse_before,
        "mse_after": plan.mse_after,
        "files_in": plan.files_in,
        "files_out": plan.files_out,
        "bytes_rewritten": plan.bytes_rewritten,
        "groups": [
            {"files": [f.path for f in g.files], "sizes": [f.size for f in g.files], "bytes_in": g.bytes_in,
             "files_out": g.files_out, "bytes_out_estimate": g.bytes_out}
            for g in plan.groups
        ],
    }


def select_partitions(table: Table, spec_id: int | None, key: str | None) -> list[PartitionFiles]:
    parts = live_partitions(table)
    if key is not None:
        pf = parts.get((spec_id if spec_id is not None else table.spec().spec_id, key))
        return [pf] if pf is not None else []
    # every spec: an older-spec partition merges within itself, or moves to the current spec (respec)
    return [pf for _, pf in sorted(parts.items())]


def merge_refusal(table: Table, pf: PartitionFiles) -> ActionRefused | None:
    """Why this partition cannot be merged safely by this version, or None."""
    if pf.delete_files and not lineage.merges_with_vectors(table, pf):
        return ActionRefused(
            "has_delete_files",
            f"partition {pf.human or '(unpartitioned)'} has {len(pf.delete_files)} delete file(s); "
            "fold them into the data first with the compact_deletes action, then merge",
        )

    reason = unsupported_reason(table.schema())
    if reason is not None:
        return ActionRefused("unsupported_type", reason)
    return None


def plan_partitions(
    table: Table, partitions: list[PartitionFiles], request: ActionRequest
) -> tuple[list[tuple[PartitionFiles, Plan]], dict[str, str], dict[str, str]]:
    """The merge plan of each partition, a reason for each partition left alone, and the planning rule
    of each partition planned (``binpack``, ``tiered``, ``cold_finish``, …).

    Pure planning on the current snapshot's metadata: ``explain`` and the action call this same
    function, so an explained plan is what the action executes while the table is unchanged.
    """
    plans: list[tuple[PartitionFiles, Plan]] = []
    skipped: dict[str, str] = {}
    rules: dict[str, str] = {}  # partition key → the planning rule that produced its plan
    order = sort_spec(table, request)
    zorder = zorder_spec(table, request)
    for pf in partitions:
        problem = merge_refusal(table, pf)
        if problem is not None:
            skipped[pf.key] = problem.reason
            continue
        if zorder is not None:
            plan, reason = plan_zorder_partition(pf, plan_files(pf, request.sizing), request)
        elif order is not None:
            plan, reason = plan_sorted_partition(table, pf, plan_files(pf, request.sizing), order[0], request)
        else:
            plan, rule = plan_merge_with_rule(table, pf, request)
            rules[pf.key] = rule
            reason = None if not plan.is_empty else rule if rule in SKIP_RULES else (
                "below_threshold" if not plan.needs_attention_before else "nothing_to_merge")
        if reason is not None:
            skipped[pf.key] = reason
        else:
            plans.append((pf, plan))
    return plans, skipped, rules


def plan_merge(table: Table, pf: PartitionFiles, request: ActionRequest) -> Plan:
    """The merge plan of one partition (respec, the live-partition policy, or bin packing apart by
    field ids), capped per group."""
    return plan_merge_with_rule(table, pf, request)[0]


def plan_merge_with_rule(table: Table, pf: PartitionFiles, request: ActionRequest) -> tuple[Plan, str]:
    """The merge plan of one partition and the rule that made it: ``respec``, ``binpack``, or one of
    :data:`autooptimize.domain.policy.RULES` (``tiered``, ``live_wait``, ``cold_finish``, …)."""
    files = plan_files(pf, request.sizing)
    if pf.spec_id != table.spec().spec_id and evolution.wants_respec(request.options):
        # a respec moves single files too; one alone larger than the cap stays in its older spec
        return cap_groups(evolution.plan_respec(files, request.target_file_size, request.tolerance), files,
                          request.max_group_bytes, min_input_files=1), "respec"
    with_ids, without_ids = evolution.split_by_field_ids(table, files)
    if request.policy == "tiered" and not without_ids and request.max_bytes is None:
        now_ms = request.now_ms if request.now_ms is not None else int(time.time() * 1000)
        newest = pf.newest_ms
        gaps: tuple[float, ...] = ()
        # past the table's late horizon: not written again, so finished now (domain.policy.past_late_horizon)
        past = request.late_horizon and request.past_late_horizon and request.partition_key == pf.key
        if request.last_write_ms is not None and request.partition_key == pf.key:
            # the listener's clock: the files of a merge carry no write time of their own
            newest = max(newest or 0, request.last_write_ms)
            gaps = request.write_gaps
        cold_after = partition_cold_after(request.cold_after_seconds, gaps, request.cold_gap_factor,
                                          request.settle_seconds)
        # no known write time (only our own outputs): nothing is being written there, so it is cold
        cold = past or newest is None or not is_live((now_ms - newest) / 1000, cold_after)
        quiet = request.quiet_merge and not cold and not is_live((now_ms - newest) / 1000, request.settle_seconds)
        chosen = plan_by_policy(files, request.target_file_size, request.tolerance, cold=cold, quiet=quiet,
                                fan_in=request.fan_in, min_input_files=request.min_input_files,
                                received_bytes=pf.bytes, expected_bytes=request.expected_partition_bytes,
                                leave_alone_below=request.leave_alone_below, price=request.price,
                                newest=request.newest_partition or request.partition_key != pf.key,
                                cold_absorb=request.cold_absorb)
        # the policy chose its files on purpose: spread them evenly, never grow the group (see balance_outputs)
        plan = balance_outputs(chosen.plan, files, min_input_files=request.min_input_files, grow=False)
        return cap_groups(plan, files, request.max_group_bytes, request.min_input_files), chosen.rule
    subsets = [s for s in (with_ids, without_ids) if s]  # read by id and by name: never one group
    plans = [balance_outputs(plan_bin_pack(s, request.target_file_size, request.tolerance,
                                           min_input_files=request.min_input_files, max_bytes=request.max_bytes),
                             s, min_input_files=request.min_input_files)
             for s in subsets]
    plan = plans[0] if len(plans) == 1 else evolution.combine_plans(files, plans, request.target_file_size,
                                                                      request.tolerance)
    return cap_groups(plan, files, request.max_group_bytes, request.min_input_files), "binpack"


def calibrated(spark: Any, table: Table, partitions: list[PartitionFiles], request: ActionRequest) -> ActionRequest:
    """The request with output bytes per row measured on a sample written by the writer of the groups
    (under ``spark`` a task on an executor, under ``local`` this process), when sizing can matter.

    Only partitions this version may merge count, and only when one holds at least a target's worth
    of candidate files (smaller partitions write one file whatever the estimate). The sample is
    written under the action's own directory and removed.
    """
    target = request.target_file_size
    engine = Engine(request.engine)
    if engine == Engine.SPARK_SQL and not table_is_local(table):  # Spark's own writer reaches only local files
        return request
    for pf in partitions:
        if merge_refusal(table, pf) is not None:
            continue
        candidates = [(f.size, f.path) for f in pf.data_files if f.size < target]
        if sum(size for size, _ in candidates) < target or len(candidates) < request.min_input_files:
            continue
        sample = calibration_sample(candidates, target)
        if evolution.may_hold_files_without_ids(table) and not all(evolution.has_field_ids(table, p) for p in sample):
            return request
        codec = table.properties.get("write.parquet.compression-codec", "zstd")
        directory = f"{action_dir(table, pf, request.action_id)}/calibration"
        # measured with the writer that will write the groups: pyarrow's and Spark's files of the same rows
        # differ in size by up to 3× (seen in tests/integration/test_sizing.py)

        by_path = {f.path: f.data_file for f in pf.data_files}
        if engine == Engine.SPARK:  # on an executor, like the groups (spark_actors/group_tasks.calibrate)

            job = run_action_job(spark, TableContext.of(table), [(group_tasks.calibrate, (
                [by_path[p] for p in sample], directory, codec, (pf.spec_id, pf.record)))])
            rows, size = job.values()[0]
            sizing = Sizing(size / rows, "calibration") if rows else NO_SIZING
        elif engine == Engine.SPARK_SQL and engine_for(table.schema(), field_ids=True) == SPARK:
            sizing = calibrate_spark_sql(spark, table, sample, directory, codec)
        else:
            sizing = calibrate_arrow(table, [by_path[p] for p in sample], directory, codec, (pf.spec_id, pf.record))
        log.info("action %s: calibrated output at %.2f bytes/row from %d files", request.action_id,
                 sizing.bytes_per_row or 0, len(sample))
        return dataclasses.replace(request, sizing=sizing)
    return request


def _mse_after(partitions: list[PartitionFiles], plans: list[tuple[PartitionFiles, Plan]], target: int,
               groups: list[GroupResult] | None = None) -> float:
    """MSE over the chosen partitions after the rewrite: measured output sizes when known, else planned."""
    replaced = {p for _, plan in plans for g in plan.groups for p in (f.path for f in g.files)}
    sizes = [f.size for pf in partitions for f in pf.data_files if f.path not in replaced]
    if groups is not None:
        sizes += [s for g in groups for s in g.output_sizes]
        return EntropyStats.from_sizes(sizes, target).mse
    planned = sum((plan.mse_after * len(pf.data_files) for pf, plan in plans), 0.0)
    return planned / max(1, sum(len(pf.data_files) for pf, _ in plans))


class MergeKind:
    """Merge, sort (``request.kind == "sort"``), zorder (``"zorder"``) and respec (option ``respec``) groups."""

    nothing_reason = "nothing_to_merge"
    rewrite_on_resume_conflict = False

    def plan(self, table: Table, request: ActionRequest, spark: Any) -> Planned | None:
        partitions = select_partitions(table, request.spec_id, request.partition_key)
        if not partitions:
            return None
        if request.sizing.bytes_per_row is None and not request.dry_run and (
                spark is not None or request.engine == Engine.LOCAL.value):  # local: measured in this process
            with phase("calibration"):
                request = calibrated(spark, table, partitions, request)
        plans, skipped, rules = plan_partitions(table, partitions, request)
        if request.partition_key is not None and skipped:
            problem = merge_refusal(table, partitions[0])
            if problem is not None:
                raise problem
        total = EntropyStats.empty()
        for pf in partitions:
            total = total.merge(EntropyStats.from_sizes([f.size for f in pf.data_files], request.target_file_size))
        units = tuple(Unit(pf, index, group) for pf, plan in plans for index, group in enumerate(plan.groups))
        summary = {"partitions": [plan_to_dict(pf, plan, rules.get(pf.key)) for pf, plan in plans],
                   "skipped": skipped,
                   "sizing": request.sizing.as_dict()}
        target = request.target_file_size
        return Planned(units, skipped, summary, total.mse,
                       lambda groups: _mse_after(partitions, plans, target, groups), request)

    def check_writable(self, table: Table, planned: Planned) -> None:
        return None  # each group decides its path (Spark or pyarrow) or refuses as it is rewritten

    def concurrency(self, request: ActionRequest) -> int:
        return request.concurrency

    def rewrite(self, spark: Any, table: Table, unit: Unit, directory: str, codec: str, hooks: Hooks,
                request: ActionRequest) -> GroupResult:
        """One group in this process's threads (``local``) or as its own Spark SQL job (``spark_sql``);
        a group of the ``spark`` engine goes with the others through :meth:`rewrite_action`."""
        g = prepare_group(table, unit, directory, request)
        if spark is None and g.engine != Engine.LOCAL:
            raise without_spark(request)
        if g.engine == Engine.SPARK:
            return self.rewrite_action(spark, table, [unit], [directory], codec, hooks, request)[0]
        return rewrite_one(spark, table, g, codec, hooks)

    def rewrite_action(self, spark: Any, table: Table, units: list[Unit], directories: list[str], codec: str,
                       hooks: Hooks, request: ActionRequest, tag: str | None = None) -> list[GroupResult]:
        return rewrite_in_one_job(spark, table, units, directories, codec, hooks, request, tag)

    def removals(self, table: Table, planned: Planned) -> list[Any] | None:
        """Every planned group's input data files; None on a table whose inputs' deletion vectors go with them
        (the commit finds those on its own head)."""
        if lineage.keeps_lineage(table):
            return None
        return [f.data_file for unit in planned.units for f in _input_files(unit)]

    def commit(self, table: Table, request: ActionRequest, groups: list[GroupResult], part: int | None = None,
               parts: int | None = None, ahead: StagedRemoval | None = None) -> Committed:
        """One REPLACE snapshot of ``groups`` (whole groups); ``part``/``parts`` mark a partial-progress part."""
        live, live_deletes = live_inputs(table, groups)
        inputs = [p for g in groups for p in g.inputs]
        with phase("commit.footers"):
            added = _added_files(table, live, groups)
        properties = {ACTION_ID_PROPERTY: request.action_id, ACTION_KIND_PROPERTY: request.kind}
        if part is not None:
            properties[ACTION_PART_PROPERTY] = str(part)
        if parts is not None:
            properties[ACTION_PARTS_PROPERTY] = str(parts)
        stats = CommitStats()
        vectors = lineage.vectors_removed(groups, live_deletes)  # v3: a data file's DV goes with it
        snapshot = commit_replace(table, [live[p].data_file for p in inputs] + vectors, added, properties,
                                  allowed_deletes=frozenset(p for g in groups for p in g.deletes or ()), stats=stats,
                                  ahead=ahead)
        return Committed(snapshot.snapshot_id, commit_facts(stats))


def _input_files(unit: Unit) -> list[Any]:
    """The live files (path and DataFile) a planned group reads."""
    by_path = {f.path: f for f in unit.partition.data_files}
    return [by_path[f.path] for f in unit.work.files]


def _added_files(table: Table, live: dict[str, Any], groups: list[GroupResult]) -> list[Any]:
    """The DataFiles of the groups' outputs, from their footers, in their inputs' (or their own) partition."""
    added: list[Any] = []
    for g in groups:
        if g.output_partitions is not None and g.data_files is not None:  # a respec on the executors
            added.extend(g.data_files)
            continue
        if g.output_partitions is not None:  # rewritten into another spec: each output has its own partition
            added.extend(evolution_data_files(table, g))
            continue
        first = live[g.inputs[0]].data_file
        if g.data_files is not None:  # read from the footers on the executors that wrote them
            added.extend(_in_spec(f, first.spec_id) for f in g.data_files)
            continue
        added.extend(data_file_from_footer(table, p, first.spec_id, first.partition, g.sort_order_id)
                     for p in g.outputs)
    return added


def _in_spec(data_file: Any, spec_id: int) -> Any:
    """``data_file`` (read on an executor, written in its inputs' partition) with its spec id (not a field
    of the manifest entry, so not carried by pickling)."""
    data_file.spec_id = spec_id
    return data_file


def rewrite_data_files(settings: Settings, request: ActionRequest, spark: Any, save_checkpoint: CheckpointWriter,
                       hooks: Hooks | None = None) -> ActionOutcome:
    """Execute (or finish) one merge, sort or z-order action: Iceberg's rewrite_data_files with the bin-pack,
    sort or z-order strategy (services/rewrite/lifecycle.run_rewrite)."""
    return run_rewrite(MergeKind(), settings, request, spark, save_checkpoint, hooks)
