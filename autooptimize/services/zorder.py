"""The z-order action's plan: which columns, which files, and the key each group is ordered by.

The columns are, first match wins: the action's ``zorder_columns`` option, the table's tuning
(``track --zorder-columns 'a,b'``). Two to four top-level columns of a number, date, timestamp,
string, binary or boolean type. A partition is rewritten whole (cut into consecutive runs only over
``AO_MAX_GROUP_BYTES``), range-partitioned on the z-value so each output file holds one stretch of
the curve, and sorted by it within the file. The z-value's arithmetic is autooptimize/domain/zorder.py;
its per-group scale comes from the input files' column bounds (metadata, no extra read of the data).

Unlike a sort, a z-ordered partition cannot be recognised from its bounds (the boxes of a z-curve's
stretches still overlap a little), so an ad-hoc zorder rewrites a partition of two or more files again;
decide offers it only while the partition needs attention (MSE ≥ T²), as it does a sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table
from pyiceberg.types import DecimalType, PrimitiveType

from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, expected_outputs
from autooptimize.domain.zorder import KIND_OF_TYPE, MAX_COLUMNS, MIN_COLUMNS, ZKey, bits_per_column, key_for
from autooptimize.errors import ActionRefused, InvalidArgument
from autooptimize.services.evolution import engine_option
from autooptimize.services.progress import PROGRESS_OPTIONS, validate_progress_options
from autooptimize.services.sort import SortColumn, bound

OPTION = "zorder_columns"


@dataclass(frozen=True)
class ZColumn:
    name: str
    field_id: int
    kind: str  # autooptimize.domain.zorder.KIND_OF_TYPE's values


def _kind(field_type: Any) -> str | None:
    name = "decimal" if isinstance(field_type, DecimalType) else str(field_type)
    return KIND_OF_TYPE.get(name)


def parse_zorder_columns(table: Table, text: Any) -> list[ZColumn]:
    """``"a, b"`` → key columns of ``table``; InvalidArgument naming what is wrong and what is valid."""
    if not isinstance(text, str):
        raise InvalidArgument(f"{OPTION} must be {MIN_COLUMNS} to {MAX_COLUMNS} comma-separated column names "
                              f"(got {text!r})")
    schema = table.schema()
    top = {f.name: f for f in schema.fields}
    names = [n.strip() for n in text.split(",") if n.strip()]
    columns: list[ZColumn] = []
    for name in names:
        field = top.get(name)
        if field is None:
            raise InvalidArgument(f"z-order column {name!r} is not a top-level column of the table; "
                                  f"columns: {', '.join(top)}")
        kind = _kind(field.field_type) if isinstance(field.field_type, PrimitiveType) else None
        if kind is None:
            raise InvalidArgument(f"z-order column {name!r} is of type {field.field_type}; valid types: "
                                  f"{', '.join(sorted(KIND_OF_TYPE))}")
        columns.append(ZColumn(name, field.field_id, kind))
    if not MIN_COLUMNS <= len(columns) <= MAX_COLUMNS:
        raise InvalidArgument(f"{OPTION} {text!r} names {len(columns)} column(s); a z-order takes "
                              f"{MIN_COLUMNS} to {MAX_COLUMNS} (for one column, sort by it)")
    if len({c.name for c in columns}) != len(columns):
        raise InvalidArgument(f"{OPTION} {text!r} names a column twice")
    return columns


def resolve_zorder(table: Table, option: str | None, configured: str | None) -> list[ZColumn]:
    """The action's columns: its option, else the table's tuning; refused when neither names any."""
    if option:
        return parse_zorder_columns(table, option)
    if configured:
        return parse_zorder_columns(table, configured)
    raise ActionRefused("no_zorder_columns",
                        "the table has no z-order columns: set them with `autooptimize track TABLE "
                        "--zorder-columns 'col_a,col_b'`, or give the action the option zorder_columns")


def validate_options(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The zorder action's options: ``zorder_columns`` (checked against the table now), ``engine`` (as
    for a merge), ``partial_progress`` and ``max_commits`` (see services/progress)."""
    valid = (OPTION, "engine", *PROGRESS_OPTIONS)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"unknown option(s) for zorder: {', '.join(unknown)}; valid: {', '.join(valid)}")
    out = validate_progress_options(options)
    if "engine" in options:
        out["engine"] = engine_option(options["engine"])
    if OPTION in options:
        out[OPTION] = ", ".join(c.name for c in parse_zorder_columns(table, options[OPTION]))
    return out


def _bounds(table: Table, data_files: list[Any], column: ZColumn) -> tuple[Any, Any]:
    """The smallest lower and the largest upper bound of ``column`` over ``data_files`` (None: unknown)."""
    as_sort = SortColumn(column.name, column.field_id)
    lows = [v for v in (bound(f, as_sort, table, "lower_bounds") for f in data_files) if v is not None]
    highs = [v for v in (bound(f, as_sort, table, "upper_bounds") for f in data_files) if v is not None]
    if not lows or not highs:
        return None, None
    return min(lows), max(highs)


def group_keys(table: Table, data_files: list[Any], columns: list[ZColumn]) -> list[ZKey]:
    """The z-order keys of one group, scaled by its input files' bounds (see autooptimize.domain.zorder)."""
    bits = bits_per_column(len(columns))
    keys = []
    for column in columns:
        low, high = _bounds(table, data_files, column)
        keys.append(key_for(column.name, column.kind, low, high, bits))
    return keys


def plan_zorder(files: list[PlanFile], target: int, tolerance: int, min_input_files: int,
                max_bytes: int | None) -> Plan:
    """The whole partition as one group (empty below ``min_input_files`` files or over ``max_bytes``)."""
    sizes = [f.size for f in files]
    before = EntropyStats.from_sizes(sizes, target)
    if len(files) < max(2, min_input_files) or (max_bytes is not None and sum(sizes) > max_bytes):
        return Plan(target, tolerance, (), before.mse, before.mse, len(files), len(files))
    group = RewriteGroup(tuple(files), expected_outputs(sum(f.rewritten_size for f in files), target))
    after = EntropyStats.from_sizes(group.output_sizes(), target)
    return Plan(target, tolerance, (group,), before.mse, after.mse, len(files), after.n)


def boxes(table: Table, data_files: list[Any], columns: list[ZColumn]) -> list[list[tuple[Any, Any]] | None]:
    """Each file's ``(lower, upper)`` per key column from its bounds; None for a file lacking one."""
    out: list[list[tuple[Any, Any]] | None] = []
    for f in data_files:
        box: list[tuple[Any, Any]] = []
        for c in columns:
            col = SortColumn(c.name, c.field_id)
            lo, hi = bound(f, col, table, "lower_bounds"), bound(f, col, table, "upper_bounds")
            if lo is None or hi is None:
                break
            box.append((lo, hi))
        out.append(box if len(box) == len(columns) else None)
    return out


def _meet(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> bool:
    return all(lo1 <= hi2 and lo2 <= hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=True))


def overlap_counts(table: Table, data_files: list[Any], columns: list[ZColumn]) -> list[int]:
    """For each file, how many other files' boxes (on every key column) meet its own; a file without
    bounds meets every other. A filter on the key columns must read every file whose box it meets, so
    fewer meetings is better clustering."""
    spans = boxes(table, data_files, columns)
    n = len(spans)
    counts = [0] * n
    for i in range(n):
        for j in range(i + 1, n):
            a, b = spans[i], spans[j]
            if a is None or b is None or _meet(a, b):
                counts[i] += 1
                counts[j] += 1
    return counts


#: Above this many files a partition's files are all counted as overlapping without comparing boxes
#: (the pairwise sweep is quadratic; a partition of that many files is overlapping in practice).
MAX_COMPARED_FILES = 2000


def overlapping_bytes(table: Table, pf: Any, columns: list[ZColumn]) -> int:
    """Bytes of the partition's data files whose box on the key columns meets another file's.

    Sweeps the files by their first column's lower bound, comparing a file only with those whose
    first-column range is still open, and skipping pairs already both counted.
    """
    if len(pf.data_files) > MAX_COMPARED_FILES:
        return int(pf.bytes)
    spans = boxes(table, [f.data_file for f in pf.data_files], columns)
    if any(box is None for box in spans):  # a file without bounds meets every other
        return int(pf.bytes) if len(spans) > 1 else 0
    met = [False] * len(spans)
    order = sorted(range(len(spans)), key=lambda i: spans[i][0][0])  # type: ignore[index]
    for pos, i in enumerate(order):
        a = spans[i]
        for j in order[pos + 1:]:
            b = spans[j]
            if b[0][0] > a[0][1]:  # type: ignore[index]  # sorted by lower bound: no later file reaches back
                break
            if not (met[i] and met[j]) and _meet(a, b):  # type: ignore[arg-type]
                met[i] = met[j] = True
    return sum(f.size for f, m in zip(pf.data_files, met, strict=True) if m)
