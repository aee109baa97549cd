"""How long a merge runs for what it reads: AutoAnalyze's replay lands a large merge later than a small one.

A merge's run, from its start (where the service's action reads the partition's files and plans) to its
commit, is mostly a fixed cost while it reads a few MB, and grows with its bytes once it reads hundreds: on
this project's two-core machine 0.2–0.3 s for a few MB, 2.4–3.3 s for 130–170 MB and about 16 s for 1 GB
(docs/policy-history.md, "A merge's run grows with what it reads"). A replay that lands every merge at the
median latency of small merges keeps a table of large merges too lean: m04 in the simulator at its nominal
rate keeps 0.92× the bin-pack's files with merges landing 0.4 s after their write, 1.08× at 4.4 s.

:func:`fit_pace` learns a :class:`SizePace` from merges that read sizes far enough apart to show the
slope; :meth:`SizePace.run` gives a merge's run from the median run and what it reads.

Pure: the standard library only.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_PACE_MERGES", "MIN_RUN_SECONDS", "MIN_SPAN_MB", "SIZE_SPREAD", "SizePace", "fit_pace"]

#: The least a merge runs from its start to its commit when its run depends on what it reads.
MIN_RUN_SECONDS = 0.05
#: A slope is learned only from at least this many merges that recorded their start and bytes.
MIN_PACE_MERGES = 10
#: ... whose 90th percentile of MB read is at least this many times their 10th, and at least
#: :data:`MIN_SPAN_MB` over it: merges all of about one size show their median run, not how it grows (the
#: slope is then 0).
SIZE_SPREAD = 4.0
#: A run's jitter (0.1–0.3 s between merges of one size) over a span of this many MB moves a slope by about
#: 0.01 s a MB; between merges of a few KB it would make one of seconds a MB, and a table of 100 MB merges
#: that borrowed it would be replayed with merges of minutes. Two merges give a slope only when their reads
#: differ by at least a quarter of it.
MIN_SPAN_MB = 16.0


@dataclass(frozen=True, slots=True)
class SizePace:
    """A merge runs ``seconds_per_mb`` longer for each MB it reads over ``reference_mb`` (the median of the
    merges it was learned from), and that much shorter for each MB under, but never shorter than
    ``floor_seconds`` (the fixed cost the smallest of them show); ``merges``: how many."""

    seconds_per_mb: float
    reference_mb: float
    merges: int = 0
    floor_seconds: float = MIN_RUN_SECONDS

    def __post_init__(self) -> None:
        if not (self.seconds_per_mb >= 0 and self.reference_mb >= 0 and self.floor_seconds >= MIN_RUN_SECONDS):
            raise ValueError(f"a size pace needs seconds_per_mb and reference_mb ≥ 0 and floor_seconds ≥ "
                             f"{MIN_RUN_SECONDS}, got {self.seconds_per_mb!r}, {self.reference_mb!r} and "
                             f"{self.floor_seconds!r}")

    def run(self, median_run: float, bytes_in: int) -> float:
        """Seconds from the start to the commit of a merge reading ``bytes_in``, when one of the reference
        size runs ``median_run``; at least ``floor_seconds``."""
        return max(self.floor_seconds, median_run + self.seconds_per_mb * (bytes_in / 1e6 - self.reference_mb))

    def as_dict(self) -> dict[str, float | int]:
        return {"seconds_per_mb": self.seconds_per_mb, "reference_mb": self.reference_mb, "merges": self.merges,
                "floor_seconds": self.floor_seconds}


def fit_pace(samples: Sequence[tuple[int, float]]) -> SizePace | None:
    """The pace of merges given as ``(bytes read, seconds from start to commit)``: the median of the slopes
    between every two merges whose reads differ by at least 2× and by a quarter of :data:`MIN_SPAN_MB`
    (Theil–Sen, so a merge held up by something else moves it little), not below 0, at their median MB;
    with a slope, no run shorter than the median run of the merges at or under their 10th percentile of MB
    (a line through merges of 1–170 MB ran merges of a few KB in nothing, where they take 0.24 s).
    None with fewer than :data:`MIN_PACE_MERGES` merges; a slope of 0 when their sizes spread less than
    :data:`SIZE_SPREAD` times or :data:`MIN_SPAN_MB` (10th to 90th percentile), or no two differ that much."""
    if len(samples) < MIN_PACE_MERGES:
        return None
    mbs = sorted(b / 1e6 for b, _ in samples)
    reference = statistics.median(mbs)
    low, high = mbs[len(mbs) // 10], mbs[-1 - len(mbs) // 10]
    if high < SIZE_SPREAD * max(low, 1e-6) or high - low < MIN_SPAN_MB:
        return SizePace(0.0, reference, len(samples))
    apart = MIN_SPAN_MB / 4 * 1e6
    slopes = [(r2 - r1) / ((b2 - b1) / 1e6) for (b1, r1), (b2, r2) in itertools.combinations(samples, 2)
              if max(b1, b2) >= 2 * min(b1, b2) and abs(b2 - b1) >= apart]
    slope = max(statistics.median(slopes), 0.0) if slopes else 0.0
    if not slope:
        return SizePace(0.0, reference, len(samples))
    floor = statistics.median(r for b, r in samples if b / 1e6 <= low)
    return SizePace(slope, reference, len(samples), max(floor, MIN_RUN_SECONDS))
