"""The facts the decision weighs for one partition, measured on the table's current metadata.

``decide`` (the listener's hand-over and the sweep) and ``explain`` both call :func:`choose`, so what
explain shows is what decide submits. Everything here reads metadata only (manifests, and Parquet
footers when a name mapping may hide files without field ids); nothing is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyiceberg.table import Table

from autooptimize.domain.actions import ActionRequest, Sizing
from autooptimize.domain.decision import Decision, DeleteFacts, MergeFacts, PartitionFacts, SortFacts, decide
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan
from autooptimize.domain.policy import WAIT_RULES
from autooptimize.errors import ActionRefused, InvalidArgument
from autooptimize.iceberg.files import PartitionFiles
from autooptimize.services import zorder
from autooptimize.services.rewrite.lineage import keeps_lineage
from autooptimize.services.rewrite.merge import merge_refusal, plan_files, plan_merge, plan_merge_with_rule
from autooptimize.services.rewrite.sort import sort_spec
from autooptimize.services.sizing import learned_in
from autooptimize.services.sort import bound, plan_sort
from autooptimize.storage.db import session_scope
from autooptimize.storage.stats import median_partition_bytes
from autooptimize.storage.write_clock import span_verdicts, write_clock


@dataclasses.dataclass(frozen=True)
class Choice:
    decision: Decision
    merge_plan: Plan | None
    sort_plan: Plan | None
    rule: str | None = None  # the merge planning rule (binpack, tiered, live_wait, cold_finish, …)
    zorder_plan: Plan | None = None
    facts: PartitionFacts | None = None  # what decide weighed (the budget's value and cost read it)

    @property
    def plan(self) -> Plan | None:
        """The plan of the chosen action (merge, sort or zorder), or None."""
        return {"merge": self.merge_plan, "sort": self.sort_plan, "zorder": self.zorder_plan}.get(
            self.decision.kind or "")


def planning_request(settings: Any, identifier: str, tuning: Any, *, spec_id: int | None,
                     partition_key: str | None, target_file_size: int | None = None,
                     table_id: int | None = None, known: PlanningFacts | None = None) -> ActionRequest:
    """The dry-run request decide and explain plan with: the table's tuning (defaults when untracked),
    the sizing its rewrites measured, the same group cap the actions use, and (``table_id``: tracked)
    the partition's expected bytes for the policy's scale. ``known``: the sizing and history already
    read by the caller (:func:`planning_facts`), instead of reading them again."""
    target = target_file_size or table_target(settings, tuning)
    if known is None:
        with session_scope(settings) as session:
            known = planning_facts(session, settings.catalog, identifier, table_id, spec_id, partition_key, target)
    return ActionRequest(
        action_id="plan", identifier=identifier, spec_id=spec_id, partition_key=partition_key,
        target_file_size=target, tolerance=min(tuning.tolerance if tuning else settings.tolerance_default, target),
        min_input_files=tuning.min_input_files if tuning else 2,
        max_bytes=tuning.max_bytes_per_action if tuning else None, checkpoint=None, dry_run=True,
        sort_order=tuning.sort_order if tuning else None,
        zorder_columns=tuning.zorder_columns if tuning else None, sizing=known.sizing,
        max_group_bytes=settings.max_group_bytes, policy=settings.merge_policy,
        settle_seconds=settings.settle_seconds, engine=settings.rewrite_engine, **policy_tuning(settings, tuning),
        **known.history,
    )


@dataclasses.dataclass(frozen=True)
class PlanningFacts:
    """What planning reads from PostgreSQL: the table's learned sizing and the partition's history."""

    sizing: Sizing
    history: dict[str, Any]


def table_target(settings: Any, tuning: Any) -> int:
    """The target file size a table is planned at: its own (a TableTuning or TrackedTable row), else the service's."""
    return int(tuning.target_file_size if tuning else settings.default_target_file_size)


def planning_facts(session: Any, catalog: str, identifier: str, table_id: int | None, spec_id: int | None,
                   partition_key: str | None, target: int | None) -> PlanningFacts:
    """:func:`planning_request`'s reads from PostgreSQL, in the caller's transaction (``target``: the
    table's target file size, which the expected partition bytes depend on)."""
    return PlanningFacts(learned_in(session, catalog, identifier),
                         partition_history_in(session, table_id, spec_id, partition_key, target))


def policy_tuning(settings: Any, tuning: Any) -> dict[str, Any]:
    """The live-partition policy's knobs for a request: the table's own (AutoAnalyze or ``track``) where
    set, else the service's. ``tuning`` is a TableTuning, a TrackedTable row or None."""
    fan_in = getattr(tuning, "merge_fan_in", None)
    cold_after = getattr(tuning, "cold_after_seconds", None)
    quiet = getattr(tuning, "quiet_merge", None)
    gap_factor = getattr(tuning, "cold_gap_factor", None)
    price = getattr(tuning, "merge_price", None)
    absorb = getattr(tuning, "cold_absorb", None)
    return {"price": price if price is not None else settings.merge_price,
            "fan_in": fan_in if fan_in is not None else settings.merge_fan_in,
            "cold_after_seconds": cold_after if cold_after is not None else settings.cold_after_seconds,
            "leave_alone_below": getattr(tuning, "leave_alone_below", None) or 0,
            "quiet_merge": quiet if quiet is not None else settings.quiet_merge,
            "cold_gap_factor": gap_factor if gap_factor is not None else settings.cold_gap_factor,
            "late_horizon": settings.late_horizon_finish,
            "cold_absorb": absorb if absorb is not None else settings.cold_absorb}


def partition_history(settings: Any, table_id: int | None, spec_id: int | None = None,
                      partition_key: str | None = None, target: int | None = None) -> dict[str, Any]:
    """What the listener knows that the partition's files do not say: the bytes a partition of the table
    is expected to hold (``storage.stats.median_partition_bytes`` over its other partitions at the table's
    ``target``; the policy sets a partition's scale by it) and,
    for one partition, when a writer last added a file to it (a merge's outputs carry no write time, so
    after a merge the files alone would make a partition look cold). Nothing when untracked."""
    if table_id is None:
        return partition_history_in(None, None)
    with session_scope(settings) as session:
        return partition_history_in(session, table_id, spec_id, partition_key, target)


def partition_history_in(session: Any, table_id: int | None, spec_id: int | None = None,
                         partition_key: str | None = None, target: int | None = None) -> dict[str, Any]:
    """:func:`partition_history` within the caller's transaction."""
    if table_id is None:
        return {"expected_partition_bytes": None, "last_write_ms": None, "write_gaps": (), "past_late_horizon": False,
                "newest_partition": True}
    one = (spec_id, partition_key) if spec_id is not None and partition_key is not None else None
    at, gaps = write_clock(session, table_id, *one) if one is not None else (None, ())
    past, behind = span_verdicts(session, table_id, *one) if one is not None else (False, False)
    return {"expected_partition_bytes": median_partition_bytes(session, table_id, one, target),
            "last_write_ms": at, "write_gaps": gaps, "past_late_horizon": past, "newest_partition": not behind}


def column_overlapping_bytes(table: Table, pf: PartitionFiles, column: Any) -> int:
    """Bytes of the partition's data files whose range of ``column`` overlaps another file's.

    After ordering by lower bound, a file overlaps an earlier one iff its lower bound is at most the
    largest upper bound before it, and a later one iff its upper bound reaches the next lower bound.
    Files without bounds (only nulls, or no statistics) count as overlapping.
    """
    spans = []
    unknown = 0
    for f in pf.data_files:
        lo = bound(f.data_file, column, table, "lower_bounds")
        hi = bound(f.data_file, column, table, "upper_bounds")
        if lo is None or hi is None:
            unknown += f.size
        else:
            spans.append((lo, hi, f.size))
    spans.sort(key=lambda s: s[0])
    total = unknown
    highest = None
    for i, (lo, hi, size) in enumerate(spans):
        before = highest is not None and lo <= highest
        after = i + 1 < len(spans) and hi >= spans[i + 1][0]
        if before or after:
            total += size
        highest = hi if highest is None or hi > highest else highest
    return total


def choose(table: Table, pf: PartitionFiles, request: ActionRequest, allowed: frozenset[str]) -> Choice:
    """Measure ``pf`` and decide (see autooptimize.domain.decision)."""
    problem = merge_refusal(table, pf)
    merge_plan = None
    merge = None
    rule = None
    if problem is None or problem.reason == "has_delete_files":
        merge_plan, rule = plan_merge_with_rule(table, pf, request)
        if merge_plan.is_empty:
            merge_plan = None
            if request.max_bytes is not None:  # nothing fits the budget: say so when something would help
                unlimited = plan_merge(table, pf, dataclasses.replace(request, max_bytes=None))
                if not unlimited.is_empty:
                    merge = MergeFacts(unlimited.bytes_rewritten, unlimited.files_in, unlimited.files_out,
                                       unlimited.mse_before, unlimited.mse_after, limited_by_budget=True)
    if merge_plan is not None:
        limited = False
        if request.max_bytes is not None and merge_plan.needs_attention_after:
            unlimited = plan_merge(table, pf, dataclasses.replace(request, max_bytes=None))
            limited = unlimited.bytes_rewritten > request.max_bytes
        merge = MergeFacts(merge_plan.bytes_rewritten, merge_plan.files_in, merge_plan.files_out,
                           merge_plan.mse_before, merge_plan.mse_after, limited)
    sort_plan = None
    sort = None
    # sort and z-order do not carry row lineage yet: never chosen on a v3 table (see rewrite/lineage.py)
    if "sort" in allowed and not pf.delete_files and problem is None and not keeps_lineage(table):
        try:
            order = sort_spec(table, dataclasses.replace(request, kind="sort"))
        except (ActionRefused, InvalidArgument):
            order = None
        if order is not None:
            sort_plan, _ = plan_sort(plan_files(pf, request.sizing), [f.data_file for f in pf.data_files], table,
                                     order[0], request.target_file_size, request.tolerance,
                                     request.min_input_files, request.max_bytes,
                                     max_group_bytes=request.max_group_bytes)
            sort = SortFacts(column_overlapping_bytes(table, pf, order[0][0]), pf.bytes, len(pf.data_files),
                             sort_plan.bytes_rewritten, sort_plan.files_in, sort_plan.files_out,
                             sort_plan.mse_after)
    zorder_plan, zorder = _zorder_facts(table, pf, request, allowed, problem)
    stats = pf.delete_stats
    deletes = DeleteFacts(stats.files, stats.bytes, stats.rows_deleted_estimate, stats.data_rows, pf.bytes)

    sizes = [f.size for f in pf.data_files]
    entropy = EntropyStats.from_sizes(sizes, request.target_file_size)
    facts = PartitionFacts(files=len(pf.data_files), bytes=pf.bytes, mse=entropy.mse, tolerance=request.tolerance,
                           merge=merge, deletes=deletes, sort=sort, zorder=zorder, allowed=allowed,
                           max_bytes=request.max_bytes, sse=entropy.sse,
                           capped_bytes=sum(min(s, request.target_file_size) for s in sizes),
                           target=request.target_file_size)
    decision = decide(facts)
    if problem is not None and problem.reason not in ("has_delete_files",):
        decision = Decision(None, problem.reason, decision.candidates)
    elif decision.kind is None and rule in WAIT_RULES:
        # left alone only because writers are still adding files: judged again once it settles
        decision = Decision(None, "live_wait", decision.candidates)
    return Choice(decision, merge_plan, sort_plan, rule, zorder_plan, facts)


def _zorder_facts(table: Table, pf: PartitionFiles, request: ActionRequest, allowed: frozenset[str],
                  problem: ActionRefused | None) -> tuple[Plan | None, SortFacts | None]:
    """The zorder plan and facts, when the table names z-order columns and zorder may rewrite ``pf``."""
    if ("zorder" not in allowed or pf.delete_files or problem is not None or not request.zorder_columns
            or keeps_lineage(table)):
        return None, None

    try:
        columns = zorder.parse_zorder_columns(table, request.zorder_columns)
    except InvalidArgument:  # a column dropped since the tuning named it
        return None, None
    plan = zorder.plan_zorder(plan_files(pf, request.sizing), request.target_file_size, request.tolerance,
                              request.min_input_files, request.max_bytes)
    facts = SortFacts(zorder.overlapping_bytes(table, pf, columns), pf.bytes, len(pf.data_files),
                      plan.bytes_rewritten, plan.files_in, plan.files_out, plan.mse_after)
    return plan, facts
