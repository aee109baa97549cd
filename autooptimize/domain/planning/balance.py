"""Output levelling: reshape a plan so every output lands within a band around the target."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning.types import Plan, PlanFile, RewriteGroup, expected_outputs

__all__ = ["OUTPUT_BAND_PERCENT", "balance_outputs"]

#: Outputs should land within this many percent of the target (issue 3: ±20 %).
OUTPUT_BAND_PERCENT = 20


def balance_outputs(
    plan: Plan, files: Sequence[PlanFile], *, min_input_files: int = 2, band_percent: int = OUTPUT_BAND_PERCENT,
    grow: bool = True,
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

    ``grow=False`` keeps the set of rewritten files as the plan chose it and only spreads it evenly: the
    live-partition policy chooses its files on purpose (a tier of small files, never the merged file
    beside it), and growing its group towards the band would rewrite that merged file on every merge.
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
    if grow and total < low:
        spare = sorted((f for f in files if f.path not in chosen and f.size < target and f.rewritten_size < target),
                       key=lambda f: (f.rewritten_size, f.size, f.path))
        for f in spare:
            if total >= low:
                break
            if total + f.rewritten_size <= high:
                pool.append(f)
                total += f.rewritten_size
    k = expected_outputs(total, target)
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
