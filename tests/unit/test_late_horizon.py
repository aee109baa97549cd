"""The late-horizon finish: a time partition further behind the newest than any
write has reached back is finished as soon as a newer partition starts, not after its cold-after time."""

from __future__ import annotations

import random

from autooptimize.domain.policy import HORIZON_SPAN_MARGIN, PolicyTuning, past_late_horizon
from autooptimize.domain.simulate import TimePartition, Write, simulate_policy

MiB = 1 << 20
TUNING = PolicyTuning(8 * MiB, cold_gap_factor=0.0, late_horizon=False)  # cold only after the table's 60 s
HORIZON = PolicyTuning(8 * MiB, cold_gap_factor=0.0)  # the default: the late-horizon finish on


def test_a_partition_is_past_the_horizon_only_once_the_table_spans_it_by_the_margin():
    # horizon 2: a partition 3 behind the newest is past it, once the partitions span 2 + margin
    assert past_late_horizon(10, 13, 13 - 2 - HORIZON_SPAN_MARGIN, 2)
    assert not past_late_horizon(10, 13, 13 - 2 - HORIZON_SPAN_MARGIN + 1, 2)  # a young table
    assert not past_late_horizon(11, 13, 0, 2)  # within the horizon: late data may still come
    assert not past_late_horizon(13, 13, 0, 0) and past_late_horizon(12, 13, 0, 0)
    for unknown in range(4):
        args = [10, 13, 0, 2]
        args[unknown] = None
        assert not past_late_horizon(*args)


def _hours(hours: int, late_back: int, seed: int = 3) -> list[Write]:
    """20 writes a minute into the current hour (one a minute), each now and then with a late file up to
    ``late_back`` hours back."""
    rng = random.Random(seed)
    writes = []
    for i in range(hours * 20):
        hour = i // 20
        files = [(hour, rng.randint(100_000, 300_000))]
        back = rng.randint(1, late_back) if late_back and hour >= late_back and rng.random() < 0.5 else 0
        if back:
            files.insert(0, (hour - back, rng.randint(20_000, 60_000)))
        writes.append(Write(i * 3.0, tuple(files)))
    return writes


def test_an_hour_past_the_horizon_is_finished_when_a_newer_one_starts_at_no_extra_cost():
    writes = _hours(12, late_back=2)
    plain = simulate_policy(writes, TUNING, latency=1.0)
    horizon = simulate_policy(writes, HORIZON, latency=1.0)
    # the same merges, only sooner: the same bytes rewritten and the same end layout, fewer files meanwhile
    assert horizon.bytes_rewritten == plain.bytes_rewritten and horizon.end_files == plain.end_files
    assert horizon.end_excess_mse == plain.end_excess_mse
    assert horizon.mean_live_files < plain.mean_live_files


def test_nothing_changes_while_the_table_is_younger_than_its_horizon_and_the_margin():
    writes = _hours(2 + HORIZON_SPAN_MARGIN, late_back=2)  # newest - oldest = 4 < 2 + margin
    assert simulate_policy(writes, HORIZON, 1.0) == simulate_policy(writes, TUNING, 1.0)


def test_partitions_that_are_not_ordinals_are_left_to_the_cold_timer():
    writes = [Write(w.at, tuple((f"h{p:02d}", b) for p, b in w.files)) for w in _hours(12, late_back=2)]
    assert simulate_policy(writes, HORIZON, 1.0) == simulate_policy(writes, TUNING, 1.0)


def test_a_replay_keyed_by_time_partitions_finishes_each_spec_by_its_own_horizon():
    hours = _hours(12, late_back=2)
    keyed = [Write(w.at, tuple((TimePartition(0, p, f"[{p}]"), b) for p, b in w.files)) for w in hours]
    assert simulate_policy(keyed, HORIZON, 1.0) == simulate_policy(hours, HORIZON, 1.0)
    # a second spec whose partitions are far newer neither lends its newest hour nor its horizon to the first
    other = [Write(w.at, (*w.files, (TimePartition(1, 10_000, "[10000]"), 1000))) for w in keyed]
    untimed = [Write(w.at, (*w.files, ("elsewhere", 1000))) for w in keyed]
    assert simulate_policy(other, HORIZON, 1.0) == simulate_policy(untimed, HORIZON, 1.0)
    assert simulate_policy(untimed, HORIZON, 1.0) != simulate_policy(untimed, TUNING, 1.0)
