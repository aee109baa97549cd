"""File-size histograms on power-of-two buckets, the same edges for every series of one chart.

Bucket ``i`` holds the sizes ``edges[i] <= size < edges[i + 1]``; the first bucket starts at 0 and the
last one has no upper edge. Edges are powers of two (1 KiB, 2 KiB, ...) chosen to cover every size of
every series and the target, so a "before" and an "after" series are comparable bar for bar and the
target's bucket can be marked.

Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autooptimize.errors import InvalidArgument

MIN_EDGE = 1024  # nothing finer than 1 KiB: smaller files are all "tiny" to a reader
MAX_BUCKETS = 24


@dataclass(frozen=True)
class SizeHistogram:
    """Counts and bytes per bucket; ``edges[i]`` is bucket i's lower edge (bytes), the last is open."""

    edges: tuple[int, ...]
    counts: tuple[int, ...]
    bytes: tuple[int, ...]

    @property
    def files(self) -> int:
        return sum(self.counts)

    def as_dict(self) -> dict[str, object]:
        return {"edges": list(self.edges), "labels": bucket_labels(self.edges), "counts": list(self.counts),
                "bytes": list(self.bytes), "files": self.files, "total_bytes": sum(self.bytes)}


def power_of_two_edges(sizes: Iterable[int], target: int | None = None) -> tuple[int, ...]:
    """Lower edges ``0, 2^k, 2^(k+1), ...`` covering ``sizes`` and ``target``: the first real edge is the
    largest power of two at or under the smallest size (at least 1 KiB), the last one the largest power of
    two at or under the largest size (its bucket is open). At most MAX_BUCKETS buckets: the lowest edges
    merge into the first bucket when there are more."""
    values = [_size(s) for s in sizes]
    if target is not None:
        values.append(_size(target))
    positive = [v for v in values if v > 0] or [MIN_EDGE]
    low = max(MIN_EDGE, 1 << (min(positive).bit_length() - 1))
    high = max(positive)
    edges = [0]
    edge = low
    while edge <= high:
        edges.append(edge)
        edge *= 2
    if len(edges) > MAX_BUCKETS:
        edges = [0] + edges[len(edges) - MAX_BUCKETS + 1:]
    return tuple(edges)


def size_histogram(sizes: Iterable[int], edges: Sequence[int]) -> SizeHistogram:
    """Count ``sizes`` (and their bytes) into the buckets of ``edges`` (from :func:`power_of_two_edges`)."""
    if not edges or edges[0] != 0 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise InvalidArgument(f"edges must start at 0 and increase, got {list(edges)!r}")
    counts = [0] * len(edges)
    totals = [0] * len(edges)
    for raw in sizes:
        size = _size(raw)
        index = _bucket(size, edges)
        counts[index] += 1
        totals[index] += size
    return SizeHistogram(tuple(edges), tuple(counts), tuple(totals))


def histograms(series: dict[str, Sequence[int]], target: int | None = None) -> dict[str, SizeHistogram]:
    """One histogram per named series, all on the same edges (and the target's bucket among them)."""
    edges = power_of_two_edges([s for sizes in series.values() for s in sizes], target)
    return {name: size_histogram(sizes, edges) for name, sizes in series.items()}


def bucket_of(size: int, edges: Sequence[int]) -> int:
    """The index of the bucket that holds ``size``."""
    return _bucket(_size(size), edges)


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """``< 1 KiB``, ``1–2 KiB``, ..., ``≥ 1 GiB`` for the buckets of ``edges``."""
    labels = []
    for i, low in enumerate(edges):
        if i + 1 < len(edges):
            high = edges[i + 1]
            labels.append(f"< {format_bytes(high)}" if low == 0 else f"{format_bytes(low)}–{format_bytes(high)}")
        else:
            labels.append(f"≥ {format_bytes(low)}")
    return labels


def format_bytes(n: int) -> str:
    """``512 B``, ``4 KiB``, ``1.5 MiB``: binary units, at most one decimal."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            text = f"{value:.1f}".rstrip("0").rstrip(".") if unit != "B" else str(int(value))
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _bucket(size: int, edges: Sequence[int]) -> int:
    lo, hi = 0, len(edges) - 1
    while lo < hi:  # the last edge <= size
        mid = (lo + hi + 1) // 2
        if edges[mid] <= size:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _size(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"a file size must be a non-negative integer of bytes, got {value!r}")
    return value
