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
each over the first files). ``B`` is what the files weigh once rewritten: :attr:`PlanFile.out_size`
when the caller estimates it (small files compress far better merged than alone; the actions estimate
it from the table's measured output bytes per row), else their current size. Real writers roll files at the target instead; the model errs towards
fewer, slightly larger files and is the same for every planner, so comparisons between plans are fair.

:func:`plan_iceberg_bin_pack` is the baseline (Iceberg's size-ratio rule) used by the benchmarks.

Every planner keeps every file: each input file is in exactly one group or left untouched.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autooptimize.domain.checks import non_negative_int, positive_int
from autooptimize.domain.entropy import EntropyStats
from autooptimize.errors import InvalidArgument

__all__ = [
    "BIN_SLACK_DIVISOR",
    "DEFAULT_REWRITE_COST_DIVISOR",
    "Plan",
    "PlanFile",
    "RewriteGroup",
    "Segmentation",
    "balance_outputs",
    "expected_outputs",
    "one_output_limit",
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
    #: Estimated bytes of this file's rows once rewritten with others (None: its current size).
    out_size: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise InvalidArgument(f"PlanFile.path must be a non-empty string, got {self.path!r}")
        if not isinstance(self.size, int) or self.size < 0:
            raise InvalidArgument(f"PlanFile.size must be a non-negative integer, got {self.size!r}")
        if not isinstance(self.record_count, int) or self.record_count < 0:
            raise InvalidArgument(
                f"PlanFile.record_count must be a non-negative integer, got {self.record_count!r}"
            )
        if self.out_size is not None and (not isinstance(self.out_size, int) or self.out_size < 0):
            raise InvalidArgument(f"PlanFile.out_size must be a non-negative integer, got {self.out_size!r}")

    @property
    def rewritten_size(self) -> int:
        """What the file's rows weigh once rewritten (the output model's bytes)."""
        return self.size if self.out_size is None else self.out_size


def expected_outputs(bytes_in: int, target: int) -> int:
    """Files a group of ``bytes_in`` bytes is expected to write: ``max(1, round(bytes_in / target))``.

    Rounds halves up, in integers.
    """
    return max(1, (2 * bytes_in + target) // (2 * target))


def one_output_limit(target: int) -> int:
    """The most bytes a group may hold and still write a single file: just under 1.5 targets.

    The ordered planner's default group cap: a longer run is better cut into two groups.
    """
    return (3 * target - 1) // 2


def output_sizes(bytes_in: int, target: int) -> tuple[int, ...]:
    """The sizes the output model assumes: :func:`expected_outputs` files, equal to within one byte.

    The sizes sum to ``bytes_in``; larger files come first.
    """
    return split_evenly(bytes_in, expected_outputs(bytes_in, target))


def split_evenly(total: int, parts: int) -> tuple[int, ...]:
    """``parts`` sizes that differ by at most one and sum to ``total``; larger ones first."""
    q, r = divmod(total, parts)
    return (q + 1,) * r + (q,) * (parts - r)


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
            raise InvalidArgument(
                f"RewriteGroup.files_out must be a positive integer, got {self.files_out!r}"
            )

    @property
    def bytes_in(self) -> int:
        """Bytes read and rewritten by this group."""
        return sum(f.size for f in self.files)

    @property
    def records_in(self) -> int:
        """Records in the group's inputs (0 when the caller did not give record counts)."""
        return sum(f.record_count for f in self.files)

    @property
    def bytes_out(self) -> int:
        """Bytes the output model expects the group to write (the inputs' rewritten sizes)."""
        return sum(f.rewritten_size for f in self.files)

    def output_sizes(self) -> tuple[int, ...]:
        """The ``files_out`` sizes the output model assumes; they sum to :attr:`bytes_out`."""
        return split_evenly(self.bytes_out, self.files_out)


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


_positive = positive_int
_non_negative = non_negative_int


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
    out_sizes: Sequence[int] | None = None,
) -> _Selection:
    """Pick groups most beneficial per byte first until the excess goes negative.

    When the next group would complete the plan, the cheapest group (or trimmed sub-group) that
    completes it alone is taken instead. Groups that do not lower the excess, or do not fit the
    remaining ``max_bytes``, are never taken. Unreached means best effort: every group that helps.
    Costs count ``sizes`` (bytes read and rewritten); outputs follow ``out_sizes`` (default ``sizes``).
    """
    out = sizes if out_sizes is None else out_sizes
    scored: list[tuple[float, int, int, int, list[int]]] = []
    for order, idxs in enumerate(groups):
        b = sum(map(sizes.__getitem__, idxs))
        red = _reduction_of(sum(map(out.__getitem__, idxs)), sum(map(err2.__getitem__, idxs)), len(idxs), target, t2)
        if red <= 0:
            continue
        ratio = red / b if b else float("inf")
        scored.append((-ratio, order, red, b, idxs))
    scored.sort(key=lambda c: (c[0], c[1]))  # (ratio, order) is unique: lists never compared
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
            red = _reduction(best, out, err2, target, t2)
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
    err2: Sequence[int],
    target: int,
    tolerance: int,
    before: EntropyStats,
    chosen: Iterable[Sequence[int]],
    out_sizes: Sequence[int] | None = None,
) -> Plan:
    out = sizes if out_sizes is None else out_sizes
    groups: list[RewriteGroup] = []
    n = before.n
    sse = before.sse
    for idxs in chosen:
        ordered = sorted(idxs)
        m, e_out = _output_sse(sum(map(out.__getitem__, ordered)), target)
        groups.append(RewriteGroup(tuple(map(files.__getitem__, ordered)), m))
        n += m - len(ordered)
        sse += e_out - sum(map(err2.__getitem__, ordered))
    after = EntropyStats(n, sse)
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
    """First Fit over ``order`` (indices by non-increasing size, each ≤ capacity), in O(n log n).

    Each item goes into the lowest-numbered bin it fits in. Because sizes only shrink, a bin that
    fits the current item fits every later one until it is filled: those bins wait in a min-heap by
    number, the others in a max-heap by free space until an item small enough comes along.
    """
    free: list[int] = []
    bins: list[list[int]] = []
    fits: list[int] = []  # bin numbers with free space ≥ the current item
    waiting: list[tuple[int, int]] = []  # (−free space, bin number) of bins too full for it
    push = heapq.heappush
    pop = heapq.heappop
    for idx in order:
        s = sizes[idx]
        while waiting and -waiting[0][0] >= s:
            push(fits, pop(waiting)[1])
        if fits:
            b = fits[0]
            bins[b].append(idx)
            room = free[b] - s
            free[b] = room
        else:
            b = len(bins)
            bins.append([idx])
            room = capacity - s
            free.append(room)
            push(fits, b)
        if room < s:
            pop(fits)
            push(waiting, (-room, b))
    return bins


def _balanced(
    order: Sequence[int], sizes: Sequence[int], bins: int, capacity: int, min_files: int
) -> list[list[int]] | None:
    """Spread ``order`` (by non-increasing size) over ``bins`` bins, each item into the emptiest bin.

    Equal bins carry the least squared error among bins that cannot all be filled. Once the items
    left are just enough to give every bin ``min_files`` files, they go to the emptiest bins still
    short of that. None if a bin would overflow ``capacity``. O(n log bins).
    """
    heap = [(0, b) for b in range(bins)]
    result: list[list[int]] = [[] for _ in range(bins)]
    short = bins * min_files  # files still missing before every bin has min_files
    left = len(order)
    for pos, i in enumerate(order):
        if left - pos <= short:
            # just enough files left: fill the bins short of min_files, emptiest first
            heap = [(sum(map(sizes.__getitem__, r)), b) for b, r in enumerate(result) if len(r) < min_files]
            heapq.heapify(heap)
            for j in order[pos:]:
                load, b = heap[0]
                load += sizes[j]
                if load > capacity:
                    return None
                result[b].append(j)
                if len(result[b]) < min_files:
                    heapq.heapreplace(heap, (load, b))
                else:
                    heapq.heappop(heap)
            return result
        load, b = heap[0]
        load += sizes[i]
        if load > capacity:
            return None
        if len(result[b]) < min_files:
            short -= 1
        result[b].append(i)
        heapq.heapreplace(heap, (load, b))
    return result


def _levelled(
    bins: list[list[int]], sizes: Sequence[int], target: int, capacity: int, min_files: int
) -> list[list[int]] | None:
    """``bins`` with the ones FFD left under the target levelled (:func:`_balanced`) together with the
    :data:`_LEVEL_WITH` least-filled others; None if levelling would overflow a bin. O(n log n)."""
    loads = [sum(map(sizes.__getitem__, b)) for b in bins]
    short = sum(1 for load in loads if load < target)
    take = set(sorted(range(len(bins)), key=loads.__getitem__)[: short + _LEVEL_WITH])
    order = sorted((i for b in take for i in bins[b]), key=sizes.__getitem__, reverse=True)
    spread = _balanced(order, sizes, len(take), capacity, min_files)
    return None if spread is None else [b for n, b in enumerate(bins) if n not in take] + spread


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


#: Past this many candidates the prefix estimate is first evaluated on a grid of this many points.
_ESTIMATE_GRID = 512
#: Rounds of lengthening the packed prefix before every candidate is packed.
_PREFIX_ROUNDS = 5
#: Full bins levelled together with the under-filled ones when FFD falls short (a few suffice).
_LEVEL_WITH = 4


def _essential_prefix(
    cum_bytes: Sequence[int],
    cum_err2: Sequence[int],
    target: int,
    capacity: int,
    t2: int,
    required: int,
    min_input_files: int,
) -> int:
    """Fewest smallest candidates that could lower the excess by more than ``required``.

    ``cum_bytes[k]`` and ``cum_err2[k]`` are the totals of the ``k`` smallest candidates. The estimate
    packs them into as few bins as the capacity allows, all of equal size. Long lists are searched on
    a grid first and then point by point (an estimate needs no more); returns ``len(cum_bytes) − 1``
    when no prefix would do.
    """
    n = len(cum_bytes) - 1

    def enough(k: int) -> bool:
        total = cum_bytes[k]
        m = -(-total // capacity) or 1
        q, r = divmod(total, m)
        e_q = target - q if q < target else 0
        e_q1 = target - q - 1 if q + 1 < target else 0
        return cum_err2[k] - r * e_q1 * e_q1 - (m - r) * e_q * e_q - t2 * (k - m) > required

    start = min_input_files
    stride = max(1, n // _ESTIMATE_GRID)
    if stride > 1:
        hit = next((k for k in range(start, n + 1, stride) if enough(k)), None)
        if hit is None:
            return n
        start = max(start, hit - stride + 1)
    return next((k for k in range(start, n + 1) if enough(k)), n)


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
    (larger ones are never touched but count in the MSE). The modifications:

    * only a prefix of the candidates sorted by size is packed, since the smallest files carry the
      most error per byte: the shortest prefix that could complete the plan, lengthened by the
      shortfall while it does not (at most :data:`_PREFIX_ROUNDS` rounds, then every candidate);
    * bins hold at most ``target + target // BIN_SLACK_DIVISOR`` bytes; bins of fewer than
      ``min_input_files`` files are dropped, so no file is ever rewritten into itself;
    * when the FFD bins fall short, the bins left under the target are also tried levelled with a
      few full ones (spread evenly, at least ``min_input_files`` files each): equal bins carry less
      squared error than full bins plus a remainder;
    * bins are taken most beneficial per byte first until the MSE is under ``tolerance²``, the last
      one trimmed to its cheapest part that still completes the plan (see the module doc).

    The result never groups a file twice, never holds a group of fewer than ``min_input_files`` files,
    rewrites at most ``max_bytes`` bytes when given, and is empty when the MSE is already under
    ``tolerance²``. It reaches the goal whenever cutting the size-sorted candidates into runs of at
    most the bin capacity would (that partition is tried last); otherwise it is the best effort
    found. The goal may be missed when only a cleverer packing reaches it: bin packing is NP-hard.
    """
    plan_files = _check_files(files)
    target = _positive("target", target)
    tolerance = _non_negative("tolerance", tolerance)
    min_input_files = _check_min_input(min_input_files)
    max_bytes = _check_max_bytes(max_bytes)
    sizes = [f.size for f in plan_files]
    out = [f.rewritten_size for f in plan_files]
    err2 = _squared_errors(sizes, target)
    before = EntropyStats(len(sizes), sum(err2))
    if not before.needs_attention(tolerance):
        return _build_plan(plan_files, sizes, err2, target, tolerance, before, ())
    t2 = tolerance * tolerance
    excess = before.excess(tolerance)
    # packing is by rewritten size (what lands in the outputs), smallest first
    cand = sorted((i for i, s in enumerate(sizes) if s < target and out[i] < target),
                  key=lambda i: (out[i], sizes[i]))
    cum_bytes = [0, *itertools.accumulate(map(out.__getitem__, cand))]
    cum_err2 = [0, *itertools.accumulate(map(err2.__getitem__, cand))]
    capacity = target + target // BIN_SLACK_DIVISOR

    def trim(idxs: list[int], need: int, beat: int) -> list[int] | None:
        # the smallest files of a bin carry the most error per byte: try its ascending prefixes
        ordered = sorted(idxs, key=lambda i: (out[i], sizes[i]))
        total = 0
        total_out = 0
        e_in = 0
        for k, i in enumerate(ordered, 1):
            total += sizes[i]
            total_out += out[i]
            e_in += err2[i]
            if total >= beat:
                return None
            if k >= min_input_files and _reduction_of(total_out, e_in, k, target, t2) > need:
                return ordered[:k]
        return None

    def select(bins: Iterable[list[int]]) -> _Selection:
        groups = (b for b in bins if len(b) >= min_input_files)
        return _select_essential(groups, sizes, err2, target, t2, excess, max_bytes, trim, out)

    best: _Selection | None = None
    required = excess
    k = _essential_prefix(cum_bytes, cum_err2, target, capacity, t2, required, min_input_files)
    for rounds in itertools.count(1):
        prefix = cand[k - 1 :: -1] if k else []  # the k smallest, largest first
        bins = _first_fit_decreasing(prefix, out, capacity)
        choice = select(bins)
        if not choice.reached and len(bins) > 1:
            spread = _levelled(bins, out, target, capacity, min_input_files)
            if spread is not None and (alt := select(spread)).better_than(choice):
                choice = alt
        if choice.better_than(best):
            best = choice
        if choice.reached or k >= len(cand):
            break
        # ask the estimate for the shortfall, twice as much each round; grow by at most a quarter
        required += (excess - choice.reduction + 1) << rounds
        estimate = _essential_prefix(cum_bytes, cum_err2, target, capacity, t2, required, min_input_files)
        k = len(cand) if rounds >= _PREFIX_ROUNDS else min(len(cand), max(k + 1, min(estimate, k + k // 4)))
    assert best is not None
    if not best.reached and (alt := select(_next_fit(cand, out, capacity))).better_than(best):
        best = alt
    return _build_plan(plan_files, sizes, err2, target, tolerance, before, best.groups, out)


# --------------------------------------------------------------------------------- Knuth–Plass


def _ordered_params(
    target: int,
    tolerance: int,
    min_input_files: int,
    rewrite_cost_per_byte: int | None,
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
        one_output_limit(target) if max_group_bytes is None else _positive("max_group_bytes", max_group_bytes)
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
        m, e_out = _output_sse(b, target)
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
    two_t = 2 * target
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
                m = (2 * g + target) // two_t
                q, r = divmod(g, m)
                e = target - q if q < target else 0
                e1 = target - q - 1 if q + 1 < target else 0
                c = best[j] + r * e1 * e1 + (m - r) * e * e - t2 * m + lam * g
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
    the MSE is under ``tolerance²``; the completing group may be trimmed to a cheaper run at either
    of its ends. If the groups chosen under the default rewrite charge cannot reach the goal, the
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
    err2 = _squared_errors(sizes, target)
    before = EntropyStats(len(sizes), sum(err2))
    if not before.needs_attention(tolerance):
        return _build_plan(plan_files, sizes, err2, target, tolerance, before, ())
    t2 = tolerance * tolerance
    excess = before.excess(tolerance)

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
                if k >= min_input_files and _reduction_of(total, e_in, k, target, t2) > need:
                    found, beat = sorted(run[:k]), total
                    break
        return found

    best: _Selection | None = None
    for charge in (lam, 0) if lam else (0,):
        spans = _knuth_plass(sizes, target, t2, min_input_files, charge, cap)
        groups = (list(range(a, z)) for a, z in spans if z - a > 1)
        choice = _select_essential(groups, sizes, err2, target, t2, excess, max_bytes, trim)
        if choice.better_than(best):
            best = choice
        if choice.reached:
            break
    assert best is not None
    return _build_plan(plan_files, sizes, err2, target, tolerance, before, best.groups)


# ------------------------------------------------------------------------------- output band


#: Outputs should land within this many percent of the target (issue 3: ±20 %).
OUTPUT_BAND_PERCENT = 20


def balance_outputs(
    plan: Plan, files: Sequence[PlanFile], *, min_input_files: int = 2, band_percent: int = OUTPUT_BAND_PERCENT
) -> Plan:
    """Reshape ``plan`` so each output lands within ``band_percent`` of the target where the files allow.

    First Fit fills bins to capacity and leaves the remainder in the last one, which then writes a
    file far under the target. Here the files the plan rewrites are spread over ``round(total /
    target)`` groups of nearly equal output (largest first into the lightest group, O(n log k)); when
    they add up to less than the band's floor, the smallest files the plan left alone are added until
    it is reached (a partition smaller than the target stays one small output). The set of rewritten
    files only grows that way; no file is dropped or grouped twice. The reshaped plan is returned
    only when its outputs deviate less from the target than the original's (even inside the band: the
    size estimate has an error of its own), and every group keeps ``min_input_files`` files.
    """
    if plan.is_empty:
        return plan
    target = plan.target
    low = target * (100 - band_percent) // 100
    high = target * (100 + band_percent) // 100

    def deviation(groups: Sequence[RewriteGroup]) -> int:
        return max(abs(size - target) for g in groups for size in g.output_sizes())

    pool = [f for g in plan.groups for f in g.files]
    chosen = {f.path for f in pool}
    total = sum(f.rewritten_size for f in pool)
    if total < low:
        spare = sorted((f for f in files if f.path not in chosen and f.size < target and f.rewritten_size < target),
                       key=lambda f: (f.rewritten_size, f.size, f.path))
        for f in spare:
            if total >= low:
                break
            if total + f.rewritten_size <= high:
                pool.append(f)
                total += f.rewritten_size
    k = max(1, (2 * total + target) // (2 * target))
    heap = [(0, b) for b in range(k)]
    bins: list[list[PlanFile]] = [[] for _ in range(k)]
    for f in sorted(pool, key=lambda f: (-f.rewritten_size, f.path)):
        load, b = heap[0]
        bins[b].append(f)
        heapq.heapreplace(heap, (load + f.rewritten_size, b))
    if any(len(b) < min_input_files for b in bins):
        return plan
    order = {f.path: i for i, f in enumerate(files)}
    groups = [
        RewriteGroup(tuple(sorted(b, key=lambda f: order[f.path])),
                     expected_outputs(sum(f.rewritten_size for f in b), target))
        for b in bins
    ]
    if deviation(groups) >= deviation(plan.groups):
        return plan
    rewritten = {f.path for f in pool}
    after = EntropyStats.from_sizes(
        [f.size for f in files if f.path not in rewritten] + [s for g in groups for s in g.output_sizes()], target
    )
    return Plan(target=target, tolerance=plan.tolerance, groups=tuple(groups), mse_before=plan.mse_before,
                mse_after=after.mse, files_before=plan.files_before, files_after=after.n)


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
    err2 = _squared_errors(sizes, target)
    before = EntropyStats(len(sizes), sum(err2))
    low, high = min_ratio * target, max_ratio * target
    cand = [i for i, s in enumerate(sizes) if s < low or s > high]
    cand.sort(key=sizes.__getitem__, reverse=True)
    oversized = [[i] for i in cand if sizes[i] > target]
    bins = oversized + _first_fit_decreasing([i for i in cand if sizes[i] <= target], sizes, target)
    chosen = [b for b in bins if len(b) >= min_input_files or sum(sizes[i] for i in b) > target]
    return _build_plan(plan_files, sizes, err2, target, tolerance, before, chosen)
