"""Minimal replacement: which data files of a partition to rewrite together, and no more than needed.

Two planners turn a partition's file list into a :class:`Plan` of :class:`RewriteGroup` s:

* :func:`plan_bin_pack` when order does not matter: a modified First Fit Decreasing (O(n log n));
* :func:`plan_ordered` when it does (sorted tables): a Knuth–Plass dynamic programme over the files in
  the caller's order, breaking them into consecutive groups like words into lines (O(n·w), w the most
  files that fit in one group).

Both are *essential, not complete*: they add groups most-beneficial first and stop as soon as the
partition's MSE falls under ``tolerance²``; a few small files may stay. Benefit is measured in the
quantity the stop condition tests, the partition's excess ``SSE − T²·N`` (see
:meth:`~autooptimize.domain.entropy.EntropyStats.excess`): a group of ``k`` inputs and ``m`` outputs
lowers it by ``Σ e(in)² − Σ e(out)² − T²·(k − m)``. The group that completes the plan is the cheapest
one (trimmed to the fewest bytes) that completes it, not merely the next in line.

Output model (an assumption every figure relies on): a group of ``B`` bytes is written as
``max(1, round(B / target))`` files of equal size (``B // files_out``, the remainder spread one byte
each over the first files). Real writers roll files at the target instead; the model errs towards
fewer, slightly larger files and is the same for every planner, so comparisons between plans are fair.

:func:`plan_iceberg_bin_pack` is the baseline (Iceberg's size-ratio rule) used by the benchmarks.

Every planner keeps every file: each input file is in exactly one group or left untouched.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autooptimize.domain.entropy import EntropyStats
from autooptimize.errors import InvalidArgument

__all__ = [
    "BIN_SLACK_DIVISOR",
    "DEFAULT_MAX_GROUP_TARGETS",
    "DEFAULT_REWRITE_COST_DIVISOR",
    "Plan",
    "PlanFile",
    "RewriteGroup",
    "Segmentation",
    "expected_outputs",
    "optimal_segmentation",
    "ordered_objective",
    "output_sizes",
    "plan_bin_pack",
    "plan_iceberg_bin_pack",
    "plan_ordered",
]

#: A bin-pack bin may hold up to ``target + target // BIN_SLACK_DIVISOR`` bytes (10 % slack): such a
#: bin still writes one file at or above the target (error 0) and packs noticeably tighter.
BIN_SLACK_DIVISOR = 10
#: Default ordered-planner charge per byte rewritten is ``target // DEFAULT_REWRITE_COST_DIVISOR``.
DEFAULT_REWRITE_COST_DIVISOR = 4
#: Default cap on one ordered group: ``DEFAULT_MAX_GROUP_TARGETS · target`` bytes.
DEFAULT_MAX_GROUP_TARGETS = 2

#: Consecutive spans ``(start, stop)`` (half-open indices) covering ``0..n`` in order; a span of one
#: file keeps it, a longer span rewrites its files together.
Segmentation = tuple[tuple[int, int], ...]


# --------------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class PlanFile:
    """One live data file as the planners see it. ``sort_key`` is carried, never interpreted."""

    path: str
    size: int
    record_count: int = 0
    sort_key: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise InvalidArgument(f"PlanFile.path must be a non-empty string, got {self.path!r}")
        if not isinstance(self.size, int) or self.size < 0:
            raise InvalidArgument(f"PlanFile.size must be a non-negative integer, got {self.size!r}")
        if not isinstance(self.record_count, int) or self.record_count < 0:
            raise InvalidArgument(
                f"PlanFile.record_count must be a non-negative integer, got {self.record_count!r}"
            )


def expected_outputs(bytes_in: int, target: int) -> int:
    """Files a group of ``bytes_in`` bytes is expected to write: ``max(1, round(bytes_in / target))``.

    Rounds halves up, in integers.
    """
    return max(1, (2 * bytes_in + target) // (2 * target))


def output_sizes(bytes_in: int, target: int) -> tuple[int, ...]:
    """The sizes the output model assumes: :func:`expected_outputs` files, equal to within one byte.

    The sizes sum to ``bytes_in``; larger files come first.
    """
    m = expected_outputs(bytes_in, target)
    q, r = divmod(bytes_in, m)
    return (q + 1,) * r + (q,) * (m - r)


def _output_sse(bytes_in: int, target: int) -> tuple[int, int]:
    """``(files_out, Σ e(out)²)`` for a group under the output model, without building the sizes."""
    m = expected_outputs(bytes_in, target)
    q, r = divmod(bytes_in, m)
    e_q = target - q if q < target else 0
    e_q1 = target - q - 1 if q + 1 < target else 0
    return m, r * e_q1 * e_q1 + (m - r) * e_q * e_q


@dataclass(frozen=True, slots=True)
class RewriteGroup:
    """Files rewritten together into ``files_out`` new files (set by the planner, per the output model)."""

    files: tuple[PlanFile, ...]
    files_out: int

    def __post_init__(self) -> None:
        if not self.files:
            raise InvalidArgument("RewriteGroup.files must hold at least one file")
        if not isinstance(self.files_out, int) or self.files_out < 1:
            raise InvalidArgument(f"RewriteGroup.files_out must be a positive integer, got {self.files_out!r}")

    @property
    def bytes_in(self) -> int:
        """Bytes read and rewritten by this group."""
        return sum(f.size for f in self.files)

    @property
    def records_in(self) -> int:
        """Records in the group's inputs (0 when the caller did not give record counts)."""
        return sum(f.record_count for f in self.files)

    def output_sizes(self) -> tuple[int, ...]:
        """The ``files_out`` sizes the output model assumes; they sum to :attr:`bytes_in`."""
        q, r = divmod(self.bytes_in, self.files_out)
        return (q + 1,) * r + (q,) * (self.files_out - r)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to rewrite in one partition, with the figures every action reports.

    ``groups`` are listed most beneficial first. ``mse_after`` and ``files_after`` assume each group
    writes :meth:`RewriteGroup.output_sizes`. An empty plan means "leave the partition alone".
    """

    target: int
    tolerance: int
    groups: tuple[RewriteGroup, ...]
    mse_before: float
    mse_after: float
    files_before: int
    files_after: int

    @property
    def files_in(self) -> int:
        """Files replaced by the plan."""
        return sum(len(g.files) for g in self.groups)

    @property
    def files_out(self) -> int:
        """Files the plan is expected to write."""
        return sum(g.files_out for g in self.groups)

    @property
    def bytes_rewritten(self) -> int:
        """Bytes the plan reads and writes again."""
        return sum(g.bytes_in for g in self.groups)

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to rewrite."""
        return not self.groups


# ---------------------------------------------------------------------------------------- validation


def _positive(name: str, value: int) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{name} must be a positive integer, got {value!r}") from None
    if v <= 0:
        raise InvalidArgument(f"{name} must be a positive integer, got {value!r}")
    return v


def _non_negative(name: str, value: int) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{name} must be a non-negative integer, got {value!r}") from None
    if v < 0:
        raise InvalidArgument(f"{name} must be a non-negative integer, got {value!r}")
    return v


def _check_files(files: Iterable[PlanFile]) -> tuple[PlanFile, ...]:
    result = tuple(files)
    seen: set[str] = set()
    for f in result:
        if not isinstance(f, PlanFile):
            raise InvalidArgument(f"files must be PlanFile values, got {type(f).__name__}")
        if f.path in seen:
            raise InvalidArgument(f"files must have distinct paths; {f.path!r} appears twice")
        seen.add(f.path)
    return result


def _check_min_input(min_input_files: int) -> int:
    try:
        v = operator.index(min_input_files)
    except TypeError:
        v = 0
    if v < 2:
        # a group of one file would rewrite a file into itself
        raise InvalidArgument(f"min_input_files must be an integer ≥ 2, got {min_input_files!r}")
    return v


def _check_max_bytes(max_bytes: int | None) -> int | None:
    return None if max_bytes is None else _non_negative("max_bytes", max_bytes)


# ---------------------------------------------------------------------------- shared plan machinery


def _reduction_of(bytes_in: int, e_in: int, k: int, target: int, t2: int) -> int:
    """How much rewriting ``k`` files of ``bytes_in`` bytes and squared errors ``e_in`` together lowers
    the partition's excess ``SSE − T²·N``."""
    m, e_out = _output_sse(bytes_in, target)
    return e_in - e_out - t2 * (k - m)


def _reduction(idxs: Sequence[int], sizes: Sequence[int], err2: Sequence[int], target: int, t2: int) -> int:
    """:func:`_reduction_of` for the files at ``idxs``."""
    bytes_in = sum(map(sizes.__getitem__, idxs))
    return _reduction_of(bytes_in, sum(map(err2.__getitem__, idxs)), len(idxs), target, t2)


# Given the reduction still needed and the bytes to beat, return a cheaper sub-group that alone gives
# more than that reduction, or None.
_Trimmer = Callable[[list[int], int, int], "list[int] | None"]


@dataclass(frozen=True, slots=True)
class _Selection:
    """Groups (index lists) an essential stop kept, whether they reach the goal, and their totals."""

    groups: list[list[int]]
    reached: bool
    bytes: int
    reduction: int

    def better_than(self, other: _Selection | None) -> bool:
        """Reaching the goal beats not; then fewer bytes wins, or (both short) a larger reduction."""
        if other is None:
            return True
        if self.reached != other.reached:
            return self.reached
        return self.bytes < other.bytes if self.reached else self.reduction > other.reduction


def _select_essential(
    groups: Iterable[list[int]],
    sizes: Sequence[int],
    err2: Sequence[int],
    target: int,
    t2: int,
    excess: int,
    max_bytes: int | None,
    trim: _Trimmer,
) -> _Selection:
    """Pick groups most beneficial per byte first until the excess goes negative.

    When the next group would complete the plan, the cheapest group (or trimmed sub-group) that
    completes it alone is taken instead. Groups that do not lower the excess, or do not fit the
    remaining ``max_bytes``, are never taken. Unreached means best effort: every group that helps.
    """
    scored: list[tuple[float, int, int, int, list[int]]] = []
    for order, idxs in enumerate(groups):
        b = sum(map(sizes.__getitem__, idxs))
        red = _reduction_of(b, sum(map(err2.__getitem__, idxs)), len(idxs), target, t2)
        if red <= 0:
            continue
        ratio = red / b if b else float("inf")
        scored.append((-ratio, order, red, b, idxs))
    scored.sort(key=lambda c: (c[0], c[1]))
    chosen: list[list[int]] = []
    need = excess  # the plan is complete once the chosen reductions sum to more than this
    spent = 0
    budget = max_bytes
    for pos, (_, _, red, b, idxs) in enumerate(scored):
        if budget is not None and b > budget:
            continue
        if red > need:
            best, best_bytes = idxs, b
            for _, _, _, b2, other in scored[pos:]:
                if budget is not None and b2 > budget:
                    continue
                cheaper = trim(other, need, best_bytes)
                if cheaper is not None:
                    best, best_bytes = cheaper, sum(map(sizes.__getitem__, cheaper))
            chosen.append(best)
            red = _reduction(best, sizes, err2, target, t2)
            return _Selection(chosen, True, spent + best_bytes, excess - need + red)
        chosen.append(idxs)
        need -= red
        spent += b
        if budget is not None:
            budget -= b
    return _Selection(chosen, False, spent, excess - need)


def _build_plan(
    files: Sequence[PlanFile],
    sizes: Sequence[int],
    target: int,
    tolerance: int,
    before: EntropyStats,
    chosen: Iterable[Sequence[int]],
) -> Plan:
    groups: list[RewriteGroup] = []
    added: list[int] = []
    removed: list[int] = []
    for idxs in chosen:
        ordered = sorted(idxs)
        bytes_in = sum(map(sizes.__getitem__, ordered))
        group = RewriteGroup(tuple(map(files.__getitem__, ordered)), expected_outputs(bytes_in, target))
        groups.append(group)
        removed.extend(map(sizes.__getitem__, ordered))
        added.extend(output_sizes(bytes_in, target))
    after = before.apply(added, removed, target)
    return Plan(
        target=target,
        tolerance=tolerance,
        groups=tuple(groups),
        mse_before=before.mse,
        mse_after=after.mse,
        files_before=before.n,
        files_after=after.n,
    )


def _squared_errors(sizes: Sequence[int], target: int) -> list[int]:
    return [(target - s) * (target - s) if s < target else 0 for s in sizes]


# -------------------------------------------------------------------------- First Fit Decreasing


def _first_fit_decreasing(order: Sequence[int], sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """First Fit over ``order`` (indices by decreasing size, each ≤ capacity), in O(n log n).

    A max-segment-tree over bins' free space finds the leftmost bin an item fits in; unused leaves
    stand for empty bins, so opening a bin is just fitting into the first empty one.
    """
    if not order:
        return []
    total = sum(map(sizes.__getitem__, order))
    # First Fit leaves at most one bin at most half full, so this many bins always suffice.
    bound = min(len(order), 2 * total // capacity + 2)
    leaves = 1
    while leaves < bound:
        leaves <<= 1
    tree = [capacity] * (2 * leaves)
    bins: list[list[int]] = []
    for idx in order:
        s = sizes[idx]
        i = 1
        while i < leaves:
            i <<= 1
            if tree[i] < s:
                i += 1
        leaf = i - leaves
        if leaf == len(bins):
            bins.append([idx])
        else:
            bins[leaf].append(idx)
        tree[i] -= s
        i >>= 1
        while i:
            left = tree[2 * i]
            right = tree[2 * i + 1]
            top = left if left >= right else right
            if tree[i] == top:
                break
            tree[i] = top
            i >>= 1
    return bins


def _balanced(order: Sequence[int], sizes: Sequence[int], bins: int, capacity: int) -> list[list[int]] | None:
    """Spread ``order`` (by decreasing size) over ``bins`` bins, each item into the emptiest bin.

    Equal bins minimise the squared error of bins that cannot all be filled; None if a bin would
    overflow ``capacity``. O(n log bins).
    """
    heap = [(0, b) for b in range(bins)]
    result: list[list[int]] = [[] for _ in range(bins)]
    for i in order:
        load, b = heap[0]
        load += sizes[i]
        if load > capacity:
            return None
        result[b].append(i)
        heapq.heapreplace(heap, (load, b))
    return result


def _next_fit(order: Sequence[int], sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """Cut ``order`` (by increasing size) into runs of at most ``capacity`` bytes: smallest files together."""
    result: list[list[int]] = []
    run: list[int] = []
    total = 0
    for i in order:
        if run and total + sizes[i] > capacity:
            result.append(run)
            run, total = [], 0
        run.append(i)
        total += sizes[i]
    if run:
        result.append(run)
    return result


def _essential_prefix(
    cand: Sequence[int], sizes: Sequence[int], err2: Sequence[int], target: int, t2: int, excess: int,
    min_input_files: int, capacity: int,
) -> int:
    """Fewest smallest candidates that, packed ideally into full target files, would complete the plan."""
    total = 0
    e_in = 0
    for k, idx in enumerate(cand, 1):
        total += sizes[idx]
        e_in += err2[idx]
        if k < min_input_files:
            continue
        if _EST == 0:
            full, rest = divmod(total, target)
            m = full + (1 if rest else 0)
            e_out = (target - rest) * (target - rest) if rest else 0
            if e_in - e_out - t2 * (k - m) > excess:
                return k
        else:
            m = -(-total // capacity) or 1
            q, r = divmod(total, m)
            e_q = target - q if q < target else 0
            e_q1 = target - q - 1 if q + 1 < target else 0
            e_out = r * e_q1 * e_q1 + (m - r) * e_q * e_q
            if e_in - e_out - t2 * (k - m) > excess:
                return k
    return len(cand)
_EST=1
_GROW=1.25
_NF=True
_MARGIN=0


def plan_bin_pack(
    files: Iterable[PlanFile],
    target: int,
    tolerance: int,
    *,
    min_input_files: int = 2,
    max_bytes: int | None = None,
) -> Plan:
    """Plan the fewest bytes of rewriting that bring the partition's MSE under ``tolerance²``.

    Modified First Fit Decreasing, O(n log n). Only files smaller than ``target`` are candidates
    (larger ones are never touched but count in the MSE). The smallest candidates carry the most
    error per byte, so only a prefix of the candidates sorted by size is packed: the shortest that
    could complete the plan, doubled until it does. The prefix is packed First Fit Decreasing into
    bins of at most ``target + target // BIN_SLACK_DIVISOR`` bytes; if those bins fall short, the same
    number of bins balanced (each file into the emptiest bin) is tried, since equal bins carry less
    squared error than full ones plus a remainder. Bins of fewer than ``min_input_files`` files are
    dropped; the rest are taken most beneficial per byte first until the MSE is under ``tolerance²``.
    Runs of the smallest candidates (next fit) are tried too; the plan that reaches the goal with the
    fewest bytes wins.

    The result never groups a file twice, never holds a group of fewer than ``min_input_files`` files,
    rewrites at most ``max_bytes`` bytes when given, and is empty when the MSE is already under
    ``tolerance²``. When the goal cannot be reached it is the best effort found: every bin that helps.
    """
    plan_files = _check_files(files)
    target = _positive("target", target)
    tolerance = _non_negative("tolerance", tolerance)
    min_input_files = _check_min_input(min_input_files)
    max_bytes = _check_max_bytes(max_bytes)
    sizes = [f.size for f in plan_files]
    before = EntropyStats.from_sizes(sizes, target)
    if not before.needs_attention(tolerance):
        return _build_plan(plan_files, sizes, target, tolerance, before, ())
    t2 = tolerance * tolerance
    err2 = _squared_errors(sizes, target)
    excess = before.excess(tolerance)
    cand = sorted((i for i, s in enumerate(sizes) if s < target), key=sizes.__getitem__)
    capacity = target + target // BIN_SLACK_DIVISOR

    def trim(idxs: list[int], need: int, beat: int) -> list[int] | None:
        # the smallest files of a bin carry the most error per byte: try its ascending prefixes
        ordered = sorted(idxs, key=sizes.__getitem__)
        total = 0
        e_in = 0
        for k, i in enumerate(ordered, 1):
            total += sizes[i]
            e_in += err2[i]
            if total >= beat:
                return None
            if k >= min_input_files and _reduction_of(total, e_in, k, target, t2) > need:
                return ordered[:k]
        return None

    def select(bins: Iterable[list[int]]) -> _Selection:
        groups = (b for b in bins if len(b) >= min_input_files)
        return _select_essential(groups, sizes, err2, target, t2, excess, max_bytes, trim)

    best: _Selection | None = None
    k = _essential_prefix(cand, sizes, err2, target, t2, excess, min_input_files, capacity)
    k = min(len(cand), k + (k >> _MARGIN if _MARGIN else 0))
    while True:
        prefix = cand[k - 1 :: -1] if k else []  # the k smallest, largest first
        bins = _first_fit_decreasing(prefix, sizes, capacity)
        choice = select(bins)
        if not choice.reached and len(bins) > 1:
            balanced = _balanced(prefix, sizes, len(bins), capacity)
            if balanced is not None and (alt := select(balanced)).better_than(choice):
                choice = alt
        if choice.better_than(best):
            best = choice
        if best.reached or k >= len(cand):
            break
        k = min(len(cand), max(k + 1, int(_GROW * k)))
    if (_NF or not best.reached) and (alt := select(_next_fit(cand, sizes, capacity))).better_than(best):
        best = alt
    return _build_plan(plan_files, sizes, target, tolerance, before, best.groups)


# --------------------------------------------------------------------------------- Knuth–Plass


def _ordered_params(
    target: int, tolerance: int, min_input_files: int, rewrite_cost_per_byte: int | None,
    max_group_bytes: int | None,
) -> tuple[int, int, int, int, int]:
    target = _positive("target", target)
    tolerance = _non_negative("tolerance", tolerance)
    min_input_files = _check_min_input(min_input_files)
    lam = (
        target // DEFAULT_REWRITE_COST_DIVISOR
        if rewrite_cost_per_byte is None
        else _non_negative("rewrite_cost_per_byte", rewrite_cost_per_byte)
    )
    cap = (
        DEFAULT_MAX_GROUP_TARGETS * target
        if max_group_bytes is None
        else _positive("max_group_bytes", max_group_bytes)
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

    A kept file costs ``e(s)² − T²``; a group of ``B`` bytes costs ``Σ (e(out)² − T²)`` over its
    model outputs plus ``λ·B`` (``λ = rewrite_cost_per_byte``, default ``target // 4``). The total is
    the partition's excess ``SSE − T²·N`` after the rewrite plus ``λ`` times the bytes rewritten.

    Raises :class:`~autooptimize.errors.InvalidArgument` when the spans do not cover the files in
    order, or a group has fewer than ``min_input_files`` files or more than ``max_group_bytes`` bytes
    (default ``2·target``).
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
        m, e_out = _output_sse(b, target)
        cost += e_out - t2 * m + lam * b
    if expected != len(files):
        raise InvalidArgument(f"segmentation covers 0..{expected} but there are {len(files)} files")
    return cost


def _knuth_plass(
    sizes: Sequence[int], target: int, t2: int, min_input_files: int, lam: int, cap: int
) -> list[tuple[int, int]]:
    """Spans of a segmentation with the least :func:`ordered_objective` cost (ties keep files)."""
    n = len(sizes)
    best = [0] * (n + 1)
    start_of = [0] * (n + 1)
    two_t = 2 * target
    for i in range(1, n + 1):
        s = sizes[i - 1]
        e = target - s if s < target else 0
        cost = best[i - 1] + e * e - t2
        start = i - 1
        j = i - min_input_files
        if j >= 0:
            g = 0
            for x in range(j, i):
                g += sizes[x]
            while g <= cap:
                m = (2 * g + target) // two_t
                if m <= 1:
                    e = target - g if g < target else 0
                    c = best[j] + e * e - t2 + lam * g
                else:
                    q, r = divmod(g, m)
                    e = target - q if q < target else 0
                    e1 = target - q - 1 if q + 1 < target else 0
                    c = best[j] + r * e1 * e1 + (m - r) * e * e - t2 * m + lam * g
                if c < cost:
                    cost = c
                    start = j
                if j == 0:
                    break
                j -= 1
                g += sizes[j]
        best[i] = cost
        start_of[i] = start
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
    sizes = [f.size for f in _check_files(files)]
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
    the MSE is under ``tolerance²``; the completing group may be trimmed to a cheaper consecutive
    sub-run. If the groups chosen under the default rewrite charge cannot reach the goal, the
    segmentation is recomputed with no charge (``λ = 0`` minimises the excess itself, so the goal is
    then reached whenever any segmentation within ``max_group_bytes`` reaches it).

    Every group is a consecutive run of ``files`` of at least ``min_input_files`` files and at most
    ``max_group_bytes`` bytes; no file is in two groups; at most ``max_bytes`` bytes are rewritten
    when given; the plan is empty when the MSE is already under ``tolerance²``.
    """
    plan_files = _check_files(files)
    target, tolerance, min_input_files, lam, cap = _ordered_params(
        target, tolerance, min_input_files, rewrite_cost_per_byte, max_group_bytes
    )
    max_bytes = _check_max_bytes(max_bytes)
    sizes = [f.size for f in plan_files]
    before = EntropyStats.from_sizes(sizes, target)
    if not before.needs_attention(tolerance):
        return _build_plan(plan_files, sizes, target, tolerance, before, ())
    t2 = tolerance * tolerance
    err2 = _squared_errors(sizes, target)
    excess = before.excess(tolerance)

    def trim(idxs: list[int], need: int, beat: int) -> list[int] | None:
        # cheapest consecutive sub-run that alone completes the plan; runs as costly as `beat` are cut
        best: list[int] | None = None
        for a in range(len(idxs)):
            total = 0
            e_in = 0
            for z in range(a, len(idxs)):
                total += sizes[idxs[z]]
                e_in += err2[idxs[z]]
                if total >= beat:
                    break
                k = z + 1 - a
                if k >= min_input_files and _reduction_of(total, e_in, k, target, t2) > need:
                    best, beat = idxs[a : z + 1], total
                    break
        return best

    best: _Selection | None = None
    for charge in (lam, 0) if lam else (0,):
        spans = _knuth_plass(sizes, target, t2, min_input_files, charge, cap)
        groups = (list(range(a, z)) for a, z in spans if z - a > 1)
        choice = _select_essential(groups, sizes, err2, target, t2, excess, max_bytes, trim)
        if choice.better_than(best):
            best = choice
        if best.reached:
            break
    assert best is not None
    return _build_plan(plan_files, sizes, target, tolerance, before, best.groups)


# ------------------------------------------------------------------------------------- baseline


def plan_iceberg_bin_pack(
    files: Iterable[PlanFile],
    target: int,
    *,
    min_ratio: float = 0.75,
    max_ratio: float = 1.8,
    min_input_files: int = 5,
    tolerance: int = 0,
) -> Plan:
    """Baseline: Iceberg's size-ratio rule, for comparison only.

    Files under ``min_ratio·target`` or over ``max_ratio·target`` are candidates; they are packed
    First Fit Decreasing into groups of at most ``target`` bytes (a file over the target is a group of
    its own, to be split). Groups of fewer than ``min_input_files`` files are dropped unless they hold
    more than ``target`` bytes. Every remaining group is rewritten: there is no essential stop.
    ``tolerance`` is only recorded in the plan.
    """
    plan_files = _check_files(files)
    target = _positive("target", target)
    tolerance = _non_negative("tolerance", tolerance)
    min_input_files = _positive("min_input_files", min_input_files)
    if not 0 <= min_ratio <= 1 <= max_ratio:
        raise InvalidArgument(
            f"need 0 ≤ min_ratio ≤ 1 ≤ max_ratio, got min_ratio={min_ratio!r}, max_ratio={max_ratio!r}"
        )
    sizes = [f.size for f in plan_files]
    before = EntropyStats.from_sizes(sizes, target)
    low, high = min_ratio * target, max_ratio * target
    cand = [i for i, s in enumerate(sizes) if s < low or s > high]
    cand.sort(key=sizes.__getitem__, reverse=True)
    oversized = [[i] for i in cand if sizes[i] > target]
    bins = oversized + _first_fit_decreasing([i for i in cand if sizes[i] <= target], sizes, target)
    chosen = [b for b in bins if len(b) >= min_input_files or sum(sizes[i] for i in b) > target]
    return _build_plan(plan_files, sizes, target, tolerance, before, chosen)

