"""File Size Entropy: the Netflix measure of how far a partition's data files are from the target size.

For a target size ``S`` the error of a file of ``s`` bytes is ``e = S - min(s, S)``: files at or above
the target cost nothing, small files cost up to ``S``. A partition keeps ``N`` (live data files) and
``SSE = Σ e²`` rather than the mean, so a snapshot that adds ``M`` files and removes ``D`` files updates
it in ``O(M + D)``::

    SSE' = SSE + Σ e(a)² − Σ e(d)²        N' = N + M − D        MSE = SSE / N

Everything here is exact integer arithmetic: a rolling figure equals a full recomputation bit for bit,
whatever the sequence of appends, overwrites, deletes, rewrites and expirations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autooptimize.domain.checks import non_negative_int, positive_int
from autooptimize.errors import InvalidArgument

__all__ = [
    "EntropyStats",
    "best_layout",
    "capped_bytes_of",
    "end_layout",
    "excess_needs_attention",
    "excess_over_best",
    "file_error",
    "mse_needs_attention",
    "needs_attention",
    "partition_needs_attention",
    "squared_error",
]


def _check_target(target: int) -> int:
    return positive_int("target (bytes)", target)


def _check_size(size: int) -> int:
    return non_negative_int("file size", size)


def _check_tolerance(tolerance: int) -> int:
    return non_negative_int("tolerance (bytes)", tolerance)


def file_error(size: int, target: int) -> int:
    """Return ``target - min(size, target)``: 0 for a file at or above the target, up to ``target``.

    Raises :class:`~autooptimize.errors.InvalidArgument` for a negative size or a non-positive target.
    """
    s = _check_size(size)
    t = _check_target(target)
    return t - s if s < t else 0


def squared_error(size: int, target: int) -> int:
    """Return ``file_error(size, target) ** 2``, the file's contribution to the partition's SSE."""
    e = file_error(size, target)
    return e * e


def needs_attention(sse: int, n_files: int, tolerance: int) -> bool:
    """The attention rule, and the one place it lives: ``MSE ≥ tolerance²``, i.e. ``sse ≥ tolerance²·n_files``.

    Decided exactly in integers (no float rounding at any size); False when there are no files.
    Raises :class:`~autooptimize.errors.InvalidArgument` for a negative tolerance when there are files.
    """
    if n_files <= 0:
        return False
    t = _check_tolerance(tolerance)
    return sse >= t * t * n_files


def mse_needs_attention(mse: float, n_files: int, tolerance: int) -> bool:
    """:func:`needs_attention` for a caller that holds only a float MSE (prefer the integer SSE).

    The float is compared as the exact fraction it is (``mse = p / q``, so ``p ≥ tolerance²·q``), never
    through ``float(tolerance) ** 2``, which rounds once ``tolerance²`` passes 2⁵³. Raises
    :class:`~autooptimize.errors.InvalidArgument` for a NaN or negative MSE.
    """
    if math.isnan(mse) or mse < 0:
        raise InvalidArgument(f"mse must be a non-negative number, got {mse!r}")
    if n_files <= 0:
        return False
    if math.isinf(mse):
        return True
    numerator, denominator = float(mse).as_integer_ratio()
    return needs_attention(numerator, denominator, tolerance)


def _sum_squared_errors(sizes: Iterable[int], target: int) -> tuple[int, int]:
    """Count and SSE of ``sizes`` against an already validated ``target``."""
    count = 0
    sse = 0
    for size in sizes:
        s = _check_size(size)
        if s < target:
            sse += (target - s) * (target - s)
        count += 1
    return count, sse


@dataclass(frozen=True, slots=True)
class EntropyStats:
    """The entropy of one partition: ``n`` live data files whose squared errors sum to ``sse``.

    Values are immutable; every operation returns a new value. ``n`` and ``sse`` are never negative and
    ``sse`` is 0 whenever ``n`` is 0. The target size is not stored: the caller passes the same target
    to every call for a given partition (a change of target needs a fresh :meth:`from_sizes`).
    """

    n: int
    sse: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 0:
            raise InvalidArgument(f"n must be a non-negative integer file count, got {self.n!r}")
        if not isinstance(self.sse, int) or self.sse < 0:
            raise InvalidArgument(f"sse must be a non-negative integer, got {self.sse!r}")
        if self.n == 0 and self.sse != 0:
            raise InvalidArgument(f"sse must be 0 when n is 0, got sse={self.sse}")

    @classmethod
    def empty(cls) -> EntropyStats:
        """The entropy of a partition with no files."""
        return cls(0, 0)

    @classmethod
    def from_sizes(cls, sizes: Iterable[int], target: int) -> EntropyStats:
        """Exact entropy of a partition whose live data files have ``sizes`` bytes (a full scan)."""
        n, sse = _sum_squared_errors(sizes, _check_target(target))
        return cls(n, sse)

    def apply(self, added: Iterable[int], removed: Iterable[int], target: int) -> EntropyStats:
        """Roll the figure forward over a snapshot that added ``added`` and removed ``removed`` files.

        The result equals :meth:`from_sizes` over the partition's new file list exactly. Raises
        :class:`~autooptimize.errors.InvalidArgument` when the removals cannot have come from this
        partition (``n`` or ``sse`` would go negative, or files would remain with no error left to
        hold): the rolling figure cannot be trusted and the partition needs a scan.
        """
        t = _check_target(target)
        m, sse_added = _sum_squared_errors(added, t)
        d, sse_removed = _sum_squared_errors(removed, t)
        n = self.n + m - d
        sse = self.sse + sse_added - sse_removed
        if n < 0:
            raise InvalidArgument(
                f"removed lists {d} files but the partition holds only {self.n + m}; "
                "the rolling stats are stale and the partition needs a scan"
            )
        if sse < 0 or (n == 0 and sse != 0):
            raise InvalidArgument(
                f"removed files carry more squared error than the partition holds (sse would be {sse} "
                f"with {n} files); the rolling stats are stale and the partition needs a scan"
            )
        return EntropyStats(n, sse)

    def merge(self, other: EntropyStats) -> EntropyStats:
        """Entropy of the union of two disjoint file sets measured against the same target."""
        return EntropyStats(self.n + other.n, self.sse + other.sse)

    @property
    def mse(self) -> float:
        """Mean squared error ``sse / n`` in bytes²; 0.0 for an empty partition."""
        return self.sse / self.n if self.n else 0.0

    def excess(self, tolerance: int) -> int:
        """``sse - tolerance² · n``: how far the partition is over its tolerance, exactly.

        Negative exactly when the MSE is under ``tolerance²``; planners drive this below zero.
        """
        t = _check_tolerance(tolerance)
        return self.sse - t * t * self.n

    def needs_attention(self, tolerance: int) -> bool:
        """True when ``MSE ≥ tolerance²``, decided exactly in integers; False for an empty partition.

        The partition's form of :func:`needs_attention`.
        """
        return needs_attention(self.sse, self.n, tolerance)


def best_layout(total_bytes: int, target: int) -> tuple[int, int]:
    """``(n_best, sse_best)`` of the best layout ``total_bytes`` allow: what a writer rolling at the target makes.

    ``⌊B/S⌋`` full files plus one remainder file of ``r = B mod S`` bytes when ``r > 0``, so
    ``sse_best = (S − r)²`` (0 when ``r`` is 0) and ``n_best = ⌊B/S⌋ + (r > 0)``. An even split of the
    same bytes (the planners' output model) carries at most this error, so a full merge always reaches
    it. Raises :class:`~autooptimize.errors.InvalidArgument` for negative bytes or a non-positive target.
    """
    b = non_negative_int("total_bytes", total_bytes)
    t = _check_target(target)
    full, r = divmod(b, t)
    return (full + 1, (t - r) * (t - r)) if r else (full, 0)


def end_layout(parts: Iterable[Sequence[int]], target: int) -> tuple[int, float]:
    """Files and excess MSE (bytes²) of a layout, given the sizes of each partition's files: the files, and
    Σ over partitions of max(0, SSE − SSE of the best layout of its bytes capped at the target), over the files
    (0 for no files). What a replay reports at its end, and what a check reads from the table."""
    n = over = 0
    for sizes in parts:
        n += len(sizes)
        sse = sum((target - s) ** 2 for s in sizes if s < target)
        over += max(0, sse - best_layout(sum(min(s, target) for s in sizes), target)[1])
    return n, over / n if n else 0.0


def excess_over_best(sse: int, total_bytes: int, target: int) -> int:
    """``sse − sse_best``: the squared error the partition carries beyond its best layout (may be < 0).

    Negative when files over the target absorb what a rolled writer would leave as a remainder.
    """
    return non_negative_int("sse", sse) - best_layout(total_bytes, target)[1]


def capped_bytes_of(n_files: int, small_files: int, small_bytes: int, target: int) -> int:
    """``Σ min(s, target)`` from what the listener keeps per partition: the bytes of the files under the
    target, and the target once for each file at or above it (a file over the target is never rewritten,
    so its bytes beyond the target allow no better layout)."""
    n = non_negative_int("n_files", n_files)
    small = non_negative_int("small_files", small_files)
    if small > n:
        raise InvalidArgument(f"small_files ({small}) cannot exceed n_files ({n})")
    return non_negative_int("small_bytes", small_bytes) + _check_target(target) * (n - small)


def partition_needs_attention(sse: int, n_files: int, small_files: int, small_bytes: int, target: int,
                              tolerance: int) -> bool:
    """The health rule everywhere (status, console, /metrics, decide, the listener's hand-over):
    :func:`excess_needs_attention` on the partition's bytes capped at the target
    (:func:`capped_bytes_of`). A one-file 550 KiB partition at a 1 MiB target is healthy: nothing can
    improve it."""
    return excess_needs_attention(sse, n_files, capped_bytes_of(n_files, small_files, small_bytes, target),
                                  target, tolerance)


def excess_needs_attention(sse: int, n_files: int, total_bytes: int, target: int, tolerance: int) -> bool:
    """The attention rule judged against the best layout: ``sse − sse_best ≥ tolerance² · n_files`` (and > 0).

    Uses only what the listener keeps per partition in O(1) per file: ``N``, ``SSE`` and ``B = Σ s``.
    A partition too small to ever reach ``MSE < T²`` (10 MB at S = 128 MiB: one perfect file still has
    MSE ≈ 13,900 MiB²) is no longer punished for its size: once merged into its best layout it is quiet,
    however small. What still counts is every file beyond that layout: each one adds roughly ``S²`` of
    error against ``T²`` allowed per file, so any extra small file in a small partition fires (one file
    more is one more open for every reader, whatever the bytes). Weighting by bytes instead (comparing
    MSE excess) would let a thousand 1 KB files pass; counting per file never does.

    It never fires where :func:`needs_attention` does not (``sse − sse_best ≤ sse``), so it only ever
    quiets partitions. It does fire for a merged 10 MB hour beside one late 100 KB file: that layout
    *is* one file too many. Whether to rewrite the 10 MB for it is the merge policy's call
    (:mod:`autooptimize.domain.policy`), which refuses until the small files weigh a ``1/fan_in`` share
    of the big one, so the big file's bytes are rewritten at most once per such growth.
    With ``tolerance`` 0 it fires on any positive excess. False when there are no files.
    """
    n = non_negative_int("n_files", n_files)
    if n == 0:
        return False
    t = _check_tolerance(tolerance)
    excess = excess_over_best(sse, total_bytes, target)
    return excess > 0 and excess >= t * t * n
