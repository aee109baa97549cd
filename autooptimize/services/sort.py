"""The sort action's plan: which files of a partition to rewrite in order, and by which columns.

The sort order is, first match wins: the action's ``sort_order`` option, the table's configured one
(``track --sort-order 'col_a,col_b DESC'``), the Iceberg table's own sort order. Columns are
top-level primitive columns; each may be followed by ``ASC``/``DESC`` and ``NULLS FIRST``/``NULLS LAST``
(Iceberg's defaults: ascending with nulls first, descending with nulls last).

A partition whose files already hold disjoint ranges of the first sort column (ordered by their
lower bounds) is *kept in order*: the Knuth–Plass planner (:func:`plan_ordered`) merges consecutive
runs of small files, and each run is rewritten sorted, so the ranges stay disjoint. Any other
partition is rewritten whole: range-partitioned on the first sort column (so output ranges of that
column never overlap) and sorted within each file on every sort column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.types import PrimitiveType

from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, expected_outputs, plan_ordered
from autooptimize.errors import ActionRefused, InvalidArgument, VerificationFailed
from autooptimize.services.evolution import engine_option
from autooptimize.services.progress import PROGRESS_OPTIONS, validate_progress_options


@dataclass(frozen=True)
class SortColumn:
    name: str
    field_id: int
    descending: bool = False
    nulls_first: bool = True

    def spec(self) -> str:
        return f"{self.name} {'DESC' if self.descending else 'ASC'} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


def parse_sort_order(table: Table, text: str) -> list[SortColumn]:
    """``"a, b DESC, c ASC NULLS LAST"`` → columns of ``table``; InvalidArgument naming what is wrong."""
    schema = table.schema()
    columns: list[SortColumn] = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        words = item.split()
        name, rest = words[0], [w.upper() for w in words[1:]]
        try:
            field = schema.find_field(name)
        except ValueError:
            valid = ", ".join(f.name for f in schema.fields)
            raise InvalidArgument(f"sort column {name!r} is not a column of the table; columns: {valid}") from None
        if name not in {f.name for f in schema.fields} or not isinstance(field.field_type, PrimitiveType):
            raise InvalidArgument(f"sort column {name!r} must be a top-level column of a primitive type")
        descending = False
        nulls_first: bool | None = None
        i = 0
        while i < len(rest):
            if rest[i] in ("ASC", "DESC"):
                descending = rest[i] == "DESC"
                i += 1
            elif rest[i] == "NULLS" and i + 1 < len(rest) and rest[i + 1] in ("FIRST", "LAST"):
                nulls_first = rest[i + 1] == "FIRST"
                i += 2
            else:
                raise InvalidArgument(
                    f"sort order item {item!r}: expected 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'"
                )
        columns.append(SortColumn(name, field.field_id, descending,
                                  (not descending) if nulls_first is None else nulls_first))
    if not columns:
        raise InvalidArgument(f"sort order {text!r} names no column")
    if len({c.name for c in columns}) != len(columns):
        raise InvalidArgument(f"sort order {text!r} names a column twice")
    return columns


def table_sort_order(table: Table) -> list[SortColumn]:
    """The Iceberg table's own sort order as columns (identity transforms on top-level columns only)."""
    order = table.sort_order()
    columns: list[SortColumn] = []
    for sf in order.fields:
        if str(sf.transform) != "identity":
            raise ActionRefused("unsupported_sort_order",
                                f"the table's sort order uses transform {sf.transform}; only identity is supported")
        name = table.schema().find_column_name(sf.source_id)
        if name is None or "." in name:
            raise ActionRefused("unsupported_sort_order", f"sort field {sf.source_id} is not a top-level column")
        columns.append(SortColumn(name, sf.source_id, sf.direction == SortDirection.DESC,
                                  sf.null_order == NullOrder.NULLS_FIRST))
    return columns


def resolve_sort_order(table: Table, option: str | None, configured: str | None) -> tuple[list[SortColumn], int | None]:
    """The sort columns and, when they are the table's own order, its order id (for the data files)."""
    if option:
        return parse_sort_order(table, option), None
    if configured:
        return parse_sort_order(table, configured), None
    columns = table_sort_order(table)
    if not columns:
        raise ActionRefused(
            "no_sort_order",
            "the table has no sort order: set one on the table, with `autooptimize track TABLE --sort-order "
            "'col_a,col_b'`, or give the action the option sort_order",
        )
    return columns, table.sort_order().order_id


def validate_options(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The sort action's options: ``sort_order`` (checked against the table now), ``partial_progress``
    and ``max_commits`` (see services/progress), and ``engine`` (services/evolution.engine_option)."""
    valid = ("sort_order", "engine", *PROGRESS_OPTIONS)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"unknown option(s) for sort: {', '.join(unknown)}; valid: {', '.join(valid)}")
    out = validate_progress_options(options)
    if "sort_order" in options:
        columns = parse_sort_order(table, options["sort_order"])
        out["sort_order"] = ", ".join(c.spec() for c in columns)
    if "engine" in options:
        out["engine"] = engine_option(options["engine"])
    return out


def bound(data_file: Any, column: SortColumn, table: Table, which: str) -> Any:
    """The file's ``lower_bounds``/``upper_bounds`` (``which``) value of ``column``, or None."""
    bounds = getattr(data_file, which) or {}
    raw = bounds.get(column.field_id)
    if raw is None:
        return None
    return from_bytes(table.schema().find_field(column.field_id).field_type, raw)


def ranges(table: Table, data_files: list[Any], column: SortColumn) -> list[tuple[Any, Any]] | None:
    """``(lower, upper)`` of ``column`` per file, or None if a file lacks bounds (e.g. nulls only)."""
    result = []
    for df in data_files:
        lo, hi = bound(df, column, table, "lower_bounds"), bound(df, column, table, "upper_bounds")
        if lo is None or hi is None or (df.null_value_counts or {}).get(column.field_id):
            return None
        result.append((lo, hi))
    return result


def disjoint_order(table: Table, data_files: list[Any], column: SortColumn) -> list[int] | None:
    """Indices of ``data_files`` in the column's order when their ranges are pairwise disjoint, else None."""
    spans = ranges(table, data_files, column)
    if spans is None:
        return None
    order = sorted(range(len(spans)), key=lambda i: spans[i][0], reverse=column.descending)
    for a, b in zip(order, order[1:], strict=False):
        if column.descending:
            if not spans[a][0] > spans[b][1]:
                return None
        elif not spans[a][1] < spans[b][0]:
            return None
    return order


def overlap_clusters(table: Table, data_files: list[Any], column: SortColumn) -> list[list[int]] | None:
    """Indices of ``data_files`` in clusters whose ``column`` ranges overlap within and never across.

    Sweeps the files by lower bound: a file starting at or before the highest upper bound seen so far
    joins the cluster (equal values never straddle two clusters). None when a file lacks bounds or
    holds nulls of the column. Truncated string bounds still enclose the true range, so clusters of
    bounds are clusters of values.
    """
    spans = ranges(table, data_files, column)
    if spans is None:
        return None
    clusters: list[list[int]] = []
    high: Any = None
    for i in sorted(range(len(spans)), key=lambda i: spans[i][0]):
        lo, hi = spans[i]
        if clusters and lo <= high:
            clusters[-1].append(i)
            high = max(high, hi)
        else:
            clusters.append([i])
            high = hi
    return clusters


def plan_sort(files: list[PlanFile], data_files: list[Any], table: Table, columns: list[SortColumn],
              target: int, tolerance: int, min_input_files: int, max_bytes: int | None,
              max_group_bytes: int | None = None) -> tuple[Plan, str]:
    """The partition's sort plan and how it was made (``ordered`` runs, a ``full`` sort, or ``clusters``).

    A full sort of more than ``max_group_bytes`` is split into range-disjoint jobs when the files fall
    into clusters of overlapping ranges (:func:`overlap_clusters`): consecutive clusters are packed up
    to the cap, each group sorted on its own, and the groups' ranges stay disjoint. A cluster larger
    than the cap stays one job: splitting it would need every job to read all of its files (to filter
    its range), and those jobs could not commit apart (each replaces the same inputs). Spark's range
    partitioning spills to disk, so such a job is slow rather than impossible; ``max_bytes_per_action``
    bounds it.
    """
    order = disjoint_order(table, data_files, columns[0]) if len(files) > 1 else None
    if order is not None:
        ordered = [files[i] for i in order]
        return plan_ordered(ordered, target, tolerance, min_input_files=min_input_files, max_bytes=max_bytes), "ordered"
    sizes = [f.size for f in files]
    before = EntropyStats.from_sizes(sizes, target)
    if len(files) < 2 or (max_bytes is not None and sum(sizes) > max_bytes):
        return Plan(target, tolerance, (), before.mse, before.mse, len(files), len(files)), "full"
    if max_group_bytes is not None and sum(sizes) > max_group_bytes:
        clusters = overlap_clusters(table, data_files, columns[0])
        if clusters is not None and len(clusters) > 1:
            return _plan_clusters(files, clusters, target, tolerance, max_group_bytes), "clusters"
    bytes_out = sum(f.rewritten_size for f in files)
    group = RewriteGroup(tuple(files), expected_outputs(bytes_out, target))
    after = EntropyStats.from_sizes(group.output_sizes(), target)
    return Plan(target, tolerance, (group,), before.mse, after.mse, len(files), after.n), "full"


def _plan_clusters(files: list[PlanFile], clusters: list[list[int]], target: int, tolerance: int,
                   max_group_bytes: int) -> Plan:
    """Every file rewritten sorted, in groups of consecutive clusters of at most ``max_group_bytes``."""
    groups: list[RewriteGroup] = []
    run: list[PlanFile] = []
    for cluster in clusters:
        members = [files[i] for i in cluster]
        if run and sum(f.size for f in run) + sum(f.size for f in members) > max_group_bytes:
            groups.append(RewriteGroup(tuple(run), expected_outputs(sum(f.rewritten_size for f in run), target)))
            run = []
        run.extend(members)
    if run:
        groups.append(RewriteGroup(tuple(run), expected_outputs(sum(f.rewritten_size for f in run), target)))
    before = EntropyStats.from_sizes([f.size for f in files], target)
    after = EntropyStats.from_sizes([s for g in groups for s in g.output_sizes()], target)
    return Plan(target, tolerance, tuple(groups), before.mse, after.mse, len(files), after.n)


def check_sorted_outputs(table: Table, outputs: list[Any], column: SortColumn) -> None:
    """Outputs of one group must hold disjoint ranges of the first sort column (from their footers)."""
    if len(outputs) < 2:
        return
    if str(table.schema().find_field(column.field_id).field_type) in ("string", "binary"):
        return  # footer bounds of strings are truncated prefixes: they may seem to overlap when they do not
    spans = ranges(table, outputs, column)
    if spans is None:
        return  # a file holding nulls of the column: ranges cannot be compared, the sort itself stands
    if disjoint_order(table, outputs, column) is None:
        raise VerificationFailed(
            f"sorted outputs overlap on {column.name}: {sorted(spans, key=lambda s: s[0])}"
        )
