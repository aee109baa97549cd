"""How many bytes a partition is judged against: what it holds, what its table's other partitions say it
will hold, and its scale (:func:`partition_scale`). Part of :mod:`autooptimize.domain.policy`, which
re-exports all of it.

Pure code: the standard library and :mod:`autooptimize.domain.checks` only; exact integers throughout.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from autooptimize.domain.checks import non_negative_int

__all__ = ["capped_bytes", "expected_partition_bytes", "partition_scale", "sorted_median"]


def capped_bytes(sizes: Iterable[int], target: int) -> int:
    """``Σ min(s, target)``: the partition bytes the excess rule takes (see
    :func:`~autooptimize.domain.policy.plan_partition`)."""
    return sum(min(non_negative_int("file size", s), target) for s in sizes)


def expected_partition_bytes(others: Sequence[int], target: int) -> int | None:
    """What a partition of a table is expected to hold, from the bytes of the table's other partitions: the
    median of those that hold a target's bytes or more when any do, else the median of all (None: no other
    partition). Hours that only late data reached (older than the writer's first hour) and a table's young
    hours are not what its partitions grow to; counting them put the first hours of a stream under the
    tiers and their late-only neighbours under the tiers' slower merges (docs/policy.md, "The expected
    bytes of a partition"). The median is PostgreSQL's ``percentile_cont(0.5)``: the mean of the two middle
    values, as an integer."""
    full = sorted(b for b in others if b >= target)
    return sorted_median(full) if full else sorted_median(sorted(others))


def sorted_median(ordered: Sequence[int], skip: int | None = None) -> int | None:
    """PostgreSQL's ``percentile_cont(0.5)`` of sorted ``ordered`` less one occurrence of ``skip`` (which it
    holds; None: none), without copying: the middle one, or the mean of the two middle ones, as an integer;
    None when nothing is left."""
    i = len(ordered) if skip is None else bisect.bisect_left(ordered, skip)
    rest = len(ordered) - (skip is not None)
    if rest <= 0:
        return None

    def at(j: int) -> int:  # the j-th of the rest
        return ordered[j if j < i else j + 1]
    return at(rest // 2) if rest % 2 else int((at(rest // 2 - 1) + at(rest // 2)) / 2)


def partition_scale(target: int, received_bytes: int | None, expected_bytes: int | None) -> int:
    """The bytes a partition's layout is judged against: what it holds or is expected to hold, at most
    the target (a partition of 10 MB at a 128 MiB target ends as one 10 MB file, not a 128 MiB one)."""
    return max(1, min(target, max(received_bytes or 0, expected_bytes or 0) or target))
