"""The sort and zorder kinds: merges whose groups are planned by services/sort (services/zorder) and
rewritten ordered on Spark."""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from autooptimize.domain.actions import ActionRequest
from autooptimize.domain.job_groups import cap_groups
from autooptimize.domain.planning import Plan, PlanFile
from autooptimize.iceberg.files import PartitionFiles
from autooptimize.services.sort import SortColumn, check_sorted_outputs, plan_sort, resolve_sort_order
from autooptimize.services.zorder import ZColumn, plan_zorder, resolve_zorder


def sort_spec(table: Table, request: ActionRequest) -> tuple[list[SortColumn], int | None] | None:
    """For a sort action, its columns and the table's sort order id when they are the table's order."""
    if request.kind != "sort":
        return None
    return resolve_sort_order(table, request.options.get("sort_order"), request.sort_order)


def plan_sorted_partition(table: Table, pf: PartitionFiles, files: list[PlanFile], columns: list[SortColumn],
                          request: ActionRequest) -> tuple[Plan, str | None]:
    """The partition's sort plan, and the reason it is left alone when the plan is empty."""
    plan, method = plan_sort(files, [f.data_file for f in pf.data_files], table, columns,
                             request.target_file_size, request.tolerance, request.min_input_files,
                             request.max_bytes, max_group_bytes=request.max_group_bytes)
    if method == "ordered":  # consecutive runs: capping keeps their ranges disjoint
        plan = cap_groups(plan, files, request.max_group_bytes, request.min_input_files)
    if plan.is_empty:
        return plan, "already_sorted" if method == "ordered" else "nothing_to_sort"
    return plan, None


def spark_sort(columns: list[SortColumn] | None) -> list[tuple[str, bool, bool]] | None:
    """The sort columns as the Spark rewrite takes them (name, descending, nulls first)."""
    return [(c.name, c.descending, c.nulls_first) for c in columns] if columns else None


def check_sorted_group(table: Table, outputs: list[Any], columns: list[SortColumn] | None) -> None:
    """VerificationFailed when a sorted group's outputs overlap on the first sort column."""
    if columns:
        check_sorted_outputs(table, outputs, columns[0])


def zorder_spec(table: Table, request: ActionRequest) -> list[ZColumn] | None:
    """For a zorder action, its key columns (the option, else the table's tuning); None for other kinds."""
    if request.kind != "zorder":
        return None
    return resolve_zorder(table, request.options.get("zorder_columns"), request.zorder_columns)


def plan_zorder_partition(pf: PartitionFiles, files: list[PlanFile], request: ActionRequest) -> tuple[Plan, str | None]:
    """The partition's z-order plan (whole, cut into runs only over the group cap), or why it is left alone."""
    plan = plan_zorder(files, request.target_file_size, request.tolerance, request.min_input_files,
                       request.max_bytes)
    plan = cap_groups(plan, files, request.max_group_bytes, request.min_input_files)
    return plan, "nothing_to_zorder" if plan.is_empty else None
