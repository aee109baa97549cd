"""The planners' values and output model: files in, groups out, and what a plan reports.

Output model (an assumption every figure relies on): a group of ``B`` bytes is written as
``max(1, round(B / target))`` files of equal size (``B // files_out``, the remainder spread one byte
each over the first files). ``B`` is what the files weigh once rewritten: :attr:`PlanFile.out_size`
when the caller estimates it, else their current size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autooptimize.domain.entropy import mse_needs_attention
from autooptimize.errors import InvalidArgument

__all__ = [
    "Plan",
    "PlanFile",
    "RewriteGroup",
    "even_split_sse",
    "expected_outputs",
    "one_output_limit",
    "output_sizes",
    "output_sse",
    "split_evenly",
]


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


def even_split_sse(total: int, parts: int, target: int) -> int:
    """``Σ e²`` of :func:`split_evenly` ``(total, parts)`` against ``target``, without building the sizes.

    ``e(s) = target − s`` for a file under the target, 0 otherwise (see
    :func:`~autooptimize.domain.entropy.file_error`).
    """
    q, r = divmod(total, parts)
    e_q = target - q if q < target else 0
    e_q1 = target - q - 1 if q + 1 < target else 0
    return r * e_q1 * e_q1 + (parts - r) * e_q * e_q


def output_sse(bytes_in: int, target: int) -> tuple[int, int]:
    """``(files_out, Σ e(out)²)`` for a group under the output model, without building the sizes."""
    m = expected_outputs(bytes_in, target)
    return m, even_split_sse(bytes_in, m, target)


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

    @property
    def needs_attention_before(self) -> bool:
        """True when the partition has ``MSE ≥ tolerance²`` now (the one rule, on ``mse_before``)."""
        return mse_needs_attention(self.mse_before, self.files_before, self.tolerance)

    @property
    def needs_attention_after(self) -> bool:
        """True when the partition would still have ``MSE ≥ tolerance²`` after the plan (the one rule,
        :func:`~autooptimize.domain.entropy.needs_attention`, on ``mse_after``)."""
        return mse_needs_attention(self.mse_after, self.files_after, self.tolerance)

