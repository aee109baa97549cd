"""Planning for ordered (sorted) files: a Knuth–Plass dynamic programme over the files in order.

The files are broken into consecutive groups like words into lines, O(n·w) with ``w`` the most
files that fit in one group.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Sequence

from autooptimize.domain.checks import non_negative_int, positive_int
from autooptimize.domain.planning.essential import (
    MeasuredFiles,
    Selection,
    check_files,
    check_max_bytes,
    check_min_input,
    reduction_of,
    select_essential,
)
from autooptimize.domain.planning.types import Plan, PlanFile, one_output_limit, output_sse
from autooptimize.errors import InvalidArgument

__all__ = [
    "DEFAULT_REWRITE_COST_DIVISOR",
    "Segmentation",
    "optimal_segmentation",
    "ordered_objective",
    "plan_ordered",
]

#: Default ordered-planner charge per byte rewritten is ``target // DEFAULT_REWRITE_COST_DIVISOR``.
DEFAULT_REWRITE_COST_DIVISOR = 4

#: Consecutive spans ``(start, stop)`` (half-open indices) covering ``0..n`` in order; a span of one
#: file keeps it, a longer span rewrites its files together.
Segmentation = tuple[tuple[int, int], ...]


def _ordered_params(
    target: int,
    tolerance: int,
    min_input_files: int,
    rewrite_cost_per_byte: int | None,
    max_group_bytes: int | None,
) -> tuple[int, int, int, int, int]:
    target = positive_int("target", target)
    tolerance = non_negative_int("tolerance", tolerance)
    min_input_files = check_min_input(min_input_files)
    lam = (
        target // DEFAULT_REWRITE_COST_DIVISOR
        if rewrite_cost_per_byte is None
        else non_negative_int("rewrite_cost_per_byte", rewrite_cost_per_byte)
    )
    cap = (
        one_output_limit(target) if max_group_bytes is None else positive_int("max_group_bytes", max_group_bytes)
    )
    return target, tolerance, min_input_files, lam, cap


def ordered_objective(
    files: Sequence[PlanFile],
    segmentation: Segmentation,
    target: int,
    tolerance: int,
    *,
    min_input_files: int = 2,
    rewrite_cost_per_byte: int | None = None,
    max_group_bytes: int | None = None,
) -> int:
    """The cost :func:`optimal_segmentation` minimises, for one segmentation of ``files``.

    A kept file costs ``e(s)² − T²``: nothing to rewrite, but its own error stays (were it 0, keeping
    everything would always be optimal). A group of ``B`` bytes costs ``Σ (e(out)² − T²)`` over its
    model outputs, i.e. ``(S − B)² − T²`` when ``B`` is under the target, plus ``λ·B`` (``λ =
    rewrite_cost_per_byte``, default ``target // DEFAULT_REWRITE_COST_DIVISOR``: a group must remove
    more than ``λ`` bytes² of excess per byte it rewrites). The total is the partition's excess
    ``SSE − T²·N`` after the rewrite plus ``λ`` times the bytes rewritten, so ``λ = 0`` minimises the
    excess itself. The ``−T²`` per file counts the benefit of a file within tolerance of the target.

    Raises :class:`~autooptimize.errors.InvalidArgument` when the spans do not cover the files in
    order, or a group has fewer than ``min_input_files`` files or more than ``max_group_bytes`` bytes
    (default :func:`one_output_limit`).
    """
    target, tolerance, min_input_files, lam, cap = _ordered_params(
        target, tolerance, min_input_files, rewrite_cost_per_byte, max_group_bytes
    )
    t2 = tolerance * tolerance
    expected = 0
    cost = 0
    for start, stop in segmentation:
        if start != expected or stop <= start:
            raise InvalidArgument(
                f"segmentation must be consecutive non-empty spans covering 0..{len(files)}; "
                f"got span ({start}, {stop}) where one starting at {expected} was due"
            )
        expected = stop
        if stop - start == 1:
            e = target - files[start].size
            cost += (e * e if e > 0 else 0) - t2
            continue
        if stop - start < min_input_files:
            raise InvalidArgument(
                f"span ({start}, {stop}) groups {stop - start} files; a group needs ≥ {min_input_files}"
            )
        b = sum(f.size for f in files[start:stop])
        if b > cap:
            raise InvalidArgument(f"span ({start}, {stop}) holds {b} bytes; a group may hold ≤ {cap}")
        m, e_out = output_sse(b, target)
        cost += e_out - t2 * m + lam * b
    if expected != len(files):
        raise InvalidArgument(f"segmentation covers 0..{expected} but there are {len(files)} files")
    return cost


def _last_min(values: list[int]) -> tuple[int, int]:
    """``(min(values), position of its last occurrence)``, at C speed."""
    v = min(values)
    return v, len(values) - 1 - values[::-1].index(v)


def _knuth_plass(
    sizes: Sequence[int], target: int, t2: int, min_input_files: int, lam: int, cap: int
) -> list[tuple[int, int]]:
    """Spans of a segmentation with the least :func:`ordered_objective` cost.

    ``best[i]`` is the least cost of the first ``i`` files; the last segment of ``i`` is a kept file
    or a group ``j..i``. Groups split by their byte count ``g``: under the target the cost is a
    quadratic in the prefix sum ``P[j]`` (``best[j] + P[j]² − λP[j] + 2(S − P[i])·P[j] + …``), and up to
    1.5 targets it is linear (one output at or above the target), so both minima are taken over
    whole slices with C-speed ``map``/``min``; only groups written as several files loop in Python.
    Ties go to the kept file, then to the shortest group.
    """
    n = len(sizes)
    prefix = [0, *itertools.accumulate(sizes)]
    best = [0] * (n + 1)
    start_of = [0] * (n + 1)
    quad = [0] * (n + 1)  # best[j] + P[j]² − λ·P[j]
    flat = [0] * (n + 1)  # best[j] − λ·P[j]
    add = operator.add
    for i in range(1, n + 1):
        s = sizes[i - 1]
        e = target - s if s < target else 0
        cost = best[i - 1] + e * e - t2
        start = i - 1
        hi = i - min_input_files + 1  # groups start at j < hi
        if hi > 0:
            p_i = prefix[i]
            lo = bisect.bisect_left(prefix, p_i - cap, 0, hi)
            a = bisect.bisect_right(prefix, p_i - target, lo, hi)  # j ≥ a: fewer bytes than the target
            b = bisect.bisect_right(prefix, (2 * p_i - 3 * target) // 2, lo, a)  # b ≤ j < a: one output
            if a < hi:
                x = target - p_i
                v, at = _last_min(list(map(add, quad[a:hi], map((2 * x).__mul__, prefix[a:hi]))))
                c = v + x * x + lam * p_i - t2
                if c < cost:
                    cost, start = c, a + at
            if b < a:
                v, at = _last_min(flat[b:a])
                c = v + lam * p_i - t2
                if c < cost:
                    cost, start = c, b + at
            for j in range(b - 1, lo - 1, -1):  # several outputs
                g = p_i - prefix[j]
                m, e_out = output_sse(g, target)
                c = best[j] + e_out - t2 * m + lam * g
                if c < cost:
                    cost, start = c, j
        best[i] = cost
        start_of[i] = start
        p = prefix[i]
        quad[i] = cost + p * p - lam * p
        flat[i] = cost - lam * p
    spans: list[tuple[int, int]] = []
    i = n
    while i > 0:
        spans.append((start_of[i], i))
        i = start_of[i]
    spans.reverse()
    return spans


def optimal_segmentation(
    files: Sequence[PlanFile],
    target: int,
    tolerance: int,
    *,
    min_input_files: int = 2,
    rewrite_cost_per_byte: int | None = None,
    max_group_bytes: int | None = None,
) -> Segmentation:
    """A segmentation of ``files`` (in the given order) with the least :func:`ordered_objective`.

    Knuth–Plass dynamic programme, O(n·w) with ``w`` the most consecutive files that fit in
    ``max_group_bytes``. This is the raw optimum, before the essential stop of :func:`plan_ordered`.
    """
    target, tolerance, min_input_files, lam, cap = _ordered_params(
        target, tolerance, min_input_files, rewrite_cost_per_byte, max_group_bytes
    )
    sizes = [f.size for f in check_files(files)]
    return tuple(_knuth_plass(sizes, target, tolerance * tolerance, min_input_files, lam, cap))


def plan_ordered(
    files: Sequence[PlanFile],
    target: int,
    tolerance: int,
    *,
    min_input_files: int = 2,
    max_bytes: int | None = None,
    rewrite_cost_per_byte: int | None = None,
    max_group_bytes: int | None = None,
) -> Plan:
    """Plan rewrites of consecutive runs of ``files`` (already in sort order) that bring MSE under T².

    Takes the groups of :func:`optimal_segmentation` most beneficial per byte first and stops once
    the MSE is under ``tolerance²``; the completing group may be trimmed to a cheaper run at either
    of its ends. If the groups chosen under the default rewrite charge cannot reach the goal, the
    segmentation is recomputed with no charge (``λ = 0`` minimises the excess itself, so the goal is
    then reached whenever any segmentation within ``max_group_bytes`` reaches it).

    Every group is a consecutive run of ``files`` of at least ``min_input_files`` files and at most
    ``max_group_bytes`` bytes; no file is in two groups; at most ``max_bytes`` bytes are rewritten
    when given; the plan is empty when the MSE is already under ``tolerance²``.
    """
    measured = MeasuredFiles.checked(files, target, tolerance)
    target, tolerance, min_input_files, lam, cap = _ordered_params(
        measured.target, measured.tolerance, min_input_files, rewrite_cost_per_byte, max_group_bytes
    )
    max_bytes = check_max_bytes(max_bytes)
    if measured.settled:
        return measured.plan(())
    sizes, err2, t2 = measured.sizes, measured.err2, measured.t2

    def trim(idxs: list[int], need: int, beat: int) -> list[int] | None:
        # cheapest run at either end of the group that alone completes the plan (O(len), not O(len²))
        found: list[int] | None = None
        for run in (idxs, idxs[::-1]):
            total = 0
            e_in = 0
            for k, i in enumerate(run, 1):
                total += sizes[i]
                e_in += err2[i]
                if total >= beat:
                    break
                if k >= min_input_files and reduction_of(total, e_in, k, target, t2) > need:
                    found, beat = sorted(run[:k]), total
                    break
        return found

    best: Selection | None = None
    for charge in (lam, 0) if lam else (0,):
        spans = _knuth_plass(sizes, target, t2, min_input_files, charge, cap)
        groups = (list(range(a, z)) for a, z in spans if z - a > 1)
        choice = select_essential(groups, measured, max_bytes, trim)
        if choice.better_than(best):
            best = choice
        if choice.reached:
            break
    assert best is not None
    return measured.plan(best.groups)
