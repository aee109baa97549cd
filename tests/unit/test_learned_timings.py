"""Which merges the timer lag counts (``services.learned_timings``): a merge a settle or cold moment
prompted counts from that moment, unless the moment is a cold one that may have waited for the settle
verdict to be the settle time old (the service's rule, which the replay on the listener's clock models)."""

from __future__ import annotations

from autooptimize.domain.policy import COLD_FLOOR_SECONDS, PolicyTuning
from autooptimize.services.learned_timings import MAX_TIMER_LAG, SETTLE_VERDICT_LAG, _timer_lag

TARGET = 128 << 20


def test_a_cold_moment_soon_after_the_settle_moment_is_left_out_of_the_timer_lag() -> None:
    times = [0.0, 0.5, 1.0]  # quick writes: cold after the 5 s floor, 2 s after the settle moment
    quick = PolicyTuning(TARGET)
    assert quick.cold_after([0.5, 0.5]) == COLD_FLOOR_SECONDS and quick.settle_seconds == 3.0
    assert abs(_timer_lag(times, 2, 4.4, quick) - 0.4) < 1e-9  # the settle moment at 4.0 s, 0.4 s late
    assert _timer_lag(times, 2, 6.2, quick) is None  # the cold moment at 6.0 s may have waited: left out
    assert _timer_lag(times, 2, 3.9, quick) is None  # no moment had passed


def test_a_cold_moment_well_after_the_settle_verdict_counts_from_itself() -> None:
    times = [0.0, 0.5, 1.0]
    # cold after 10 s: at 11.0 s, 7 s after the settle moment (at least the settle time and the verdict's lag)
    late = PolicyTuning(TARGET, cold_after_seconds=10.0, cold_gap_factor=0.0)
    assert 11.0 >= 4.0 + late.settle_seconds + SETTLE_VERDICT_LAG
    assert abs(_timer_lag(times, 2, 12.2, late) - 1.2) < 1e-9
    assert _timer_lag(times, 2, 11.0 + MAX_TIMER_LAG + 0.1, late) is None  # too late: a scan or a retry
    edge = PolicyTuning(TARGET, cold_after_seconds=3.0 + 3.0 + SETTLE_VERDICT_LAG, cold_gap_factor=0.0)
    assert abs(_timer_lag(times, 2, 1.0 + edge.cold_after_seconds + 0.5, edge) - 0.5) < 1e-9  # just far enough
