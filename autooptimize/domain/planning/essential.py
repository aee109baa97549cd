"""What both planners share: argument checks, the essential stop, and building the :class:`Plan`.

Benefit is measured in the quantity the stop condition tests, the partition's excess ``SSE − T²·N``
(see :meth:`~autooptimize.domain.entropy.EntropyStats.excess`): a group of ``k`` inputs and ``m``
outputs lowers it by ``Σ e(in)² − Σ e(out)² − T²·(k − m)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from autooptimize.domain.checks import non_negative_int, positive_int
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning.types import Plan, PlanFile, RewriteGroup, output_sse
from autooptimize.errors import InvalidArgument

__all__ = [
    "MeasuredFiles",
    "Selection",
    "Trimmer",
    "check_files",
    "check_max_bytes",
    "check_min_input",
    "reduction_of",
    "select_essential",
    "squared_errors",
]


def check_files(files: Iterable[PlanFile]) -> tuple[PlanFile, ...]:
    """``files`` as a tuple; raises :class:`InvalidArgument` unless they are PlanFiles of distinct paths."""
    result = tuple(files)
    seen: set[str] = set()
    for f in result:
        if not isinstance(f, PlanFile):
            raise InvalidArgument(f"files must be PlanFile values, got {type(f).__name__}")
        if f.path in seen:
            raise InvalidArgument(f"files must have distinct paths; {f.path!r} appears twice")
        seen.add(f.path)
    return result


def check_min_input(min_input_files: int) -> int:
    """``min_input_files`` as an int; raises :class:`InvalidArgument` unless it is an integer ≥ 2."""
    try:
        v = operator.index(min_input_files)
    except TypeError:
        v = 0
    if v < 2:
        # a group of one file would rewrite a file into itself
        raise InvalidArgument(f"min_input_files must be an integer ≥ 2, got {min_input_files!r}")
    return v


def check_max_bytes(max_bytes: int | None) -> int | None:
    """``max_bytes`` unchanged when None or a non-negative integer; raises :class:`InvalidArgument` otherwise."""
    return None if max_bytes is None else non_negative_int("max_bytes", max_bytes)


def squared_errors(sizes: Sequence[int], target: int) -> list[int]:
    """``e(s)²`` of each size: ``(target − s)²`` under the target, 0 at or above it."""
    return [(target - s) * (target - s) if s < target else 0 for s in sizes]


# ---------------------------------------------------------------------------- shared plan machinery


def reduction_of(bytes_in: int, e_in: int, k: int, target: int, t2: int) -> int:
    """How much rewriting ``k`` files of ``bytes_in`` bytes and squared errors ``e_in`` together lowers
    the partition's excess ``SSE − T²·N``."""
    m, e_out = output_sse(bytes_in, target)
    return e_in - e_out - t2 * (k - m)


def reduction(idxs: Sequence[int], sizes: Sequence[int], err2: Sequence[int], target: int, t2: int) -> int:
    """:func:`reduction_of` for the files at ``idxs``."""
    bytes_in = sum(map(sizes.__getitem__, idxs))
    return reduction_of(bytes_in, sum(map(err2.__getitem__, idxs)), len(idxs), target, t2)


@dataclass(frozen=True, slots=True)
class MeasuredFiles:
    """A partition's checked files with what every planner measures first.

    ``sizes`` and ``err2`` (squared errors against ``target``) are indexed like ``files``; ``before``
    holds the partition's stats before any rewrite.
    """

    files: tuple[PlanFile, ...]
    target: int
    tolerance: int
    sizes: list[int]
    err2: list[int]
    before: EntropyStats

    @classmethod
    def checked(cls, files: Iterable[PlanFile], target: int, tolerance: int) -> MeasuredFiles:
        """Check a planner's ``files``, ``target`` and ``tolerance`` (in that order), then measure them.

        Raises :class:`InvalidArgument` naming the first argument that is not valid.
        """
        plan_files = check_files(files)
        target = positive_int("target", target)
        tolerance = non_negative_int("tolerance", tolerance)
        sizes = [f.size for f in plan_files]
        err2 = squared_errors(sizes, target)
        return cls(plan_files, target, tolerance, sizes, err2, EntropyStats(len(sizes), sum(err2)))

    @property
    def settled(self) -> bool:
        """True when the partition needs no rewrite: its MSE is already under ``tolerance²``."""
        return not self.before.needs_attention(self.tolerance)

    @property
    def t2(self) -> int:
        """``tolerance²``."""
        return self.tolerance * self.tolerance

    @property
    def excess(self) -> int:
        """The partition's excess ``SSE − T²·N`` before any rewrite."""
        return self.before.excess(self.tolerance)

    def plan(self, chosen: Iterable[Sequence[int]], out_sizes: Sequence[int] | None = None) -> Plan:
        """The :class:`Plan` rewriting each index list of ``chosen`` as one group.

        Outputs follow ``out_sizes`` (default :attr:`sizes`) under the output model.
        """
        out = self.sizes if out_sizes is None else out_sizes
        groups: list[RewriteGroup] = []
        n = self.before.n
        sse = self.before.sse
        for idxs in chosen:
            ordered = sorted(idxs)
            m, e_out = output_sse(sum(map(out.__getitem__, ordered)), self.target)
            groups.append(RewriteGroup(tuple(map(self.files.__getitem__, ordered)), m))
            n += m - len(ordered)
            sse += e_out - sum(map(self.err2.__getitem__, ordered))
        after = EntropyStats(n, sse)
        return Plan(
            target=self.target,
            tolerance=self.tolerance,
            groups=tuple(groups),
            mse_before=self.before.mse,
            mse_after=after.mse,
            files_before=self.before.n,
            files_after=after.n,
        )


# Given the reduction still needed and the bytes to beat, return a cheaper sub-group that alone gives
# more than that reduction, or None.
Trimmer = Callable[[list[int], int, int], "list[int] | None"]


@dataclass(frozen=True, slots=True)
class Selection:
    """Groups (index lists) an essential stop kept, whether they reach the goal, and their totals."""

    groups: list[list[int]]
    reached: bool
    bytes: int
    reduction: int

    def better_than(self, other: Selection | None) -> bool:
        """Reaching the goal beats not; then fewer bytes wins, or (both short) a larger reduction."""
        if other is None:
            return True
        if self.reached != other.reached:
            return self.reached
        return self.bytes < other.bytes if self.reached else self.reduction > other.reduction


def select_essential(
    groups: Iterable[list[int]],
    measured: MeasuredFiles,
    max_bytes: int | None,
    trim: Trimmer,
    out_sizes: Sequence[int] | None = None,
) -> Selection:
    """Pick groups most beneficial per byte first until the excess goes negative.

    When the next group would complete the plan, the cheapest group (or trimmed sub-group) that
    completes it alone is taken instead. Groups that do not lower the excess, or do not fit the
    remaining ``max_bytes``, are never taken. Unreached means best effort: every group that helps.
    Costs count ``sizes`` (bytes read and rewritten); outputs follow ``out_sizes`` (default ``sizes``).
    """
    sizes, err2, target, t2, excess = measured.sizes, measured.err2, measured.target, measured.t2, measured.excess
    out = sizes if out_sizes is None else out_sizes
    scored: list[tuple[float, int, int, int, list[int]]] = []
    for order, idxs in enumerate(groups):
        b = sum(map(sizes.__getitem__, idxs))
        red = reduction_of(sum(map(out.__getitem__, idxs)), sum(map(err2.__getitem__, idxs)), len(idxs), target, t2)
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
            red = reduction(best, out, err2, target, t2)
            return Selection(chosen, True, spent + best_bytes, excess - need + red)
        chosen.append(idxs)
        need -= red
        spent += b
        if budget is not None:
            budget -= b
    return Selection(chosen, False, spent, excess - need)
