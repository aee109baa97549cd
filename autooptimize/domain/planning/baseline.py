"""Baseline: Iceberg's size-ratio rule, used by the benchmarks to compare the planners against."""

from __future__ import annotations

from collections.abc import Iterable

from autooptimize.domain.checks import positive_int
from autooptimize.domain.planning.binpack import first_fit_decreasing
from autooptimize.domain.planning.essential import MeasuredFiles
from autooptimize.domain.planning.types import Plan, PlanFile
from autooptimize.errors import InvalidArgument

__all__ = ["plan_iceberg_bin_pack"]

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
    measured = MeasuredFiles.checked(files, target, tolerance)
    target = measured.target
    min_input_files = positive_int("min_input_files", min_input_files)
    if not 0 <= min_ratio <= 1 <= max_ratio:
        raise InvalidArgument(
            f"need 0 ≤ min_ratio ≤ 1 ≤ max_ratio, got min_ratio={min_ratio!r}, max_ratio={max_ratio!r}"
        )
    sizes = measured.sizes
    low, high = min_ratio * target, max_ratio * target
    cand = [i for i, s in enumerate(sizes) if s < low or s > high]
    cand.sort(key=sizes.__getitem__, reverse=True)
    oversized = [[i] for i in cand if sizes[i] > target]
    bins = oversized + first_fit_decreasing([i for i in cand if sizes[i] <= target], sizes, target)
    chosen = [b for b in bins if len(b) >= min_input_files or sum(sizes[i] for i in b) > target]
    return measured.plan(chosen)
