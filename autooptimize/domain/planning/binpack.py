"""Bin packing for files whose order does not matter: a modified First Fit Decreasing, O(n log n)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence

from autooptimize.domain.planning.essential import (
    MeasuredFiles,
    Selection,
    check_max_bytes,
    check_min_input,
    reduction_of,
    select_essential,
)
from autooptimize.domain.planning.types import Plan, PlanFile, even_split_sse

__all__ = ["BIN_SLACK_DIVISOR", "first_fit_decreasing", "plan_bin_pack"]

#: A bin-pack bin may hold up to ``target + target // BIN_SLACK_DIVISOR`` bytes (10 % slack): such a
#: bin still writes one file at or above the target (error 0) and packs noticeably tighter.
BIN_SLACK_DIVISOR = 10

def first_fit_decreasing(order: Sequence[int], sizes: Sequence[int], capacity: int) -> list[list[int]]:
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
        return cum_err2[k] - even_split_sse(total, m, target) - t2 * (k - m) > required

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
    measured = MeasuredFiles.checked(files, target, tolerance)
    min_input_files = check_min_input(min_input_files)
    max_bytes = check_max_bytes(max_bytes)
    if measured.settled:
        return measured.plan(())
    target, sizes, err2, t2, excess = measured.target, measured.sizes, measured.err2, measured.t2, measured.excess
    out = [f.rewritten_size for f in measured.files]
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
            if k >= min_input_files and reduction_of(total_out, e_in, k, target, t2) > need:
                return ordered[:k]
        return None

    def select(bins: Iterable[list[int]]) -> Selection:
        groups = (b for b in bins if len(b) >= min_input_files)
        return select_essential(groups, measured, max_bytes, trim, out)

    best: Selection | None = None
    required = excess
    k = _essential_prefix(cum_bytes, cum_err2, target, capacity, t2, required, min_input_files)
    for rounds in itertools.count(1):
        prefix = cand[k - 1 :: -1] if k else []  # the k smallest, largest first
        bins = first_fit_decreasing(prefix, out, capacity)
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
    return measured.plan(best.groups, out)
