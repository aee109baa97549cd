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

from autooptimize.domain.planning.balance import OUTPUT_BAND_PERCENT, balance_outputs
from autooptimize.domain.planning.baseline import plan_iceberg_bin_pack
from autooptimize.domain.planning.binpack import BIN_SLACK_DIVISOR, plan_bin_pack
from autooptimize.domain.planning.ordered import (
    DEFAULT_REWRITE_COST_DIVISOR,
    Segmentation,
    optimal_segmentation,
    ordered_objective,
    plan_ordered,
)
from autooptimize.domain.planning.types import (
    Plan,
    PlanFile,
    RewriteGroup,
    expected_outputs,
    one_output_limit,
    output_sizes,
    split_evenly,
)

__all__ = [
    "BIN_SLACK_DIVISOR",
    "DEFAULT_REWRITE_COST_DIVISOR",
    "OUTPUT_BAND_PERCENT",
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
    "split_evenly",
]
