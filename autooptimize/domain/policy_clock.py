"""When the live-partition policy takes a partition as settled, cold, or past its table's late horizon:
the clock half of :mod:`autooptimize.domain.policy` (which re-exports all of it).

Pure code: the standard library and :mod:`autooptimize.errors` only.
"""

from __future__ import annotations

from collections.abc import Sequence

from autooptimize.errors import InvalidArgument

__all__ = ["COLD_FLOOR_SECONDS", "COLD_GAPS_KEPT", "DEFAULT_COLD_AFTER_SECONDS", "DEFAULT_COLD_GAP_FACTOR",
           "DEFAULT_SETTLE_SECONDS", "HORIZON_SPAN_MARGIN", "is_live", "partition_cold_after", "past_late_horizon"]

#: A partition with no new file for this long is settled: the service judges it again then.
DEFAULT_SETTLE_SECONDS = 3.0
#: A partition with no new file for this long is cold and finished once. Over the family, 60–300 s moved
#: every member's write amplification by under 0.1; 30 s added 0.26 on m01 (late writes into a past hour
#: come more than 30 s apart there, so it was finished, then written again and finished again).
DEFAULT_COLD_AFTER_SECONDS = 60.0
#: A partition goes cold sooner than its table's cold-after time once no file has arrived for this many
#: times the longest of its last :data:`COLD_GAPS_KEPT` gaps between writes (never under
#: :data:`COLD_FLOOR_SECONDS`; 0 turns it off). An hour the writer has left and that only late data
#: reaches (a write every few seconds) is finished about half a minute after its writes stop, not a minute;
#: the hour being written (gaps under a second) is not cold while its writes keep coming. In the
#: simulator, over benchmarks.trace_family and the streaming trace (docs/policy-history.md): k = 4, 3 gaps
#: took the streaming trace's mean live files from 1.28× to 1.12× the bin-pack's with write amplification
#: 1.63 → 1.64 and held the same goals on every member; its cost is at large targets, where a small hour
#: finished early is finished again after late data (m01 WA 2.57 → 2.82, the streaming trace at 128 MiB
#: 2.35 → 2.80). k = 3 lost m03's end layout; k = 6 and 8 gave back most of the gain.
DEFAULT_COLD_GAP_FACTOR = 4.0
COLD_GAPS_KEPT = 3
COLD_FLOOR_SECONDS = 5.0

#: The late-horizon finish (:func:`past_late_horizon`) waits until the table's time partitions span this
#: many more than its late horizon: a young table has not yet shown how far back its late data reaches.
HORIZON_SPAN_MARGIN = 3


def is_live(newest_file_age_seconds: float, settle_seconds: float = DEFAULT_SETTLE_SECONDS) -> bool:
    """True while the partition's newest file is younger than ``settle_seconds``."""
    if not newest_file_age_seconds >= 0:
        raise InvalidArgument(f"newest_file_age_seconds must be a number ≥ 0, got {newest_file_age_seconds!r}")
    if not settle_seconds >= 0:
        raise InvalidArgument(f"settle_seconds must be a number ≥ 0, got {settle_seconds!r}")
    return newest_file_age_seconds < settle_seconds


def partition_cold_after(cold_after_seconds: float, gaps: Sequence[float] | None,
                         factor: float = DEFAULT_COLD_GAP_FACTOR, settle_seconds: float = 0.0) -> float:
    """Seconds without a write after which one partition is cold: ``factor`` × the longest of its recent
    ``gaps`` between writes (seconds, newest first; only the first :data:`COLD_GAPS_KEPT` count), at least
    :data:`COLD_FLOOR_SECONDS` and ``settle_seconds``, at most the table's ``cold_after_seconds``. The
    table's time when the partition has no gap yet (one write so far) or ``factor`` is 0."""
    if not cold_after_seconds >= 0:
        raise InvalidArgument(f"cold_after_seconds must be a number ≥ 0, got {cold_after_seconds!r}")
    if not factor >= 0:
        raise InvalidArgument(f"the cold gap factor must be a number ≥ 0 (0: off), got {factor!r}")
    recent = [g for g in (gaps or ())[:COLD_GAPS_KEPT] if g is not None]
    if not factor or not recent:
        return cold_after_seconds
    if any(not g >= 0 for g in recent):
        raise InvalidArgument(f"gaps between writes must be seconds ≥ 0, got {list(gaps or ())!r}")
    return min(cold_after_seconds, max(COLD_FLOOR_SECONDS, settle_seconds, factor * max(recent)))


def past_late_horizon(ordinal: int | None, newest: int | None, oldest: int | None, horizon: int | None) -> bool:
    """True when a time partition (``ordinal``: its hour, day, month or year) is further behind the newest
    partition than any write has reached back so far (``horizon``: the most partitions behind the newest
    that a write has landed), and the table's partitions span at least ``horizon`` +
    :data:`HORIZON_SPAN_MARGIN` (``oldest`` to ``newest``). Such a partition is not written again, so the
    cold finish can run at once instead of after its cold-after time. False when any value is unknown.

    The service's listener keeps each partition's ordinal and late lag (``ao_partition_stats``); decide
    and the merge take such a partition as cold (``AO_LATE_HORIZON_FINISH``, ``PolicyTuning.late_horizon``)."""
    if ordinal is None or newest is None or oldest is None or horizon is None:
        return False
    return newest - oldest >= horizon + HORIZON_SPAN_MARGIN and newest - ordinal > horizon
