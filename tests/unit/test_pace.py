"""A merge's run grows with what it reads (``domain.pace``): the pace is fitted from merges of spread sizes,
and the replay lands a large merge later than a small one."""

from __future__ import annotations

import random

import pytest

from autooptimize.domain.pace import MIN_PACE_MERGES, MIN_RUN_SECONDS, SizePace, fit_pace
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import Merge, Write, simulate_policy
from tests.unit.test_simulate_start import merge_everything  # every file of a partition written to, once two

MB = 1_000_000


def test_too_few_merges_give_no_pace():
    assert fit_pace([(MB * (i + 1), 0.3) for i in range(MIN_PACE_MERGES - 1)]) is None


def test_merges_of_about_one_size_give_no_slope_at_their_median():
    rng = random.Random(1)
    samples = [(int(rng.uniform(130, 170) * MB), rng.uniform(2.0, 3.5)) for _ in range(30)]
    pace = fit_pace(samples)
    assert pace is not None and pace.seconds_per_mb == 0.0 and pace.merges == 30
    assert 130 <= pace.reference_mb <= 170


def test_the_slope_of_spread_merges_holds_against_a_few_held_up():
    rng = random.Random(2)
    # 0.25 s plus 0.03 s per MB, from 1 MB to 1 GB; every tenth held up 20 s by something else
    samples = []
    for i in range(200):
        mb = 10 ** rng.uniform(0, 3)
        samples.append((int(mb * MB), 0.25 + 0.03 * mb + rng.uniform(-0.05, 0.05) + (20.0 if i % 10 == 0 else 0.0)))
    pace = fit_pace(samples)
    assert pace is not None and abs(pace.seconds_per_mb - 0.03) < 0.003, pace
    mbs = sorted(b / MB for b, _ in samples)
    assert pace.reference_mb == pytest.approx((mbs[99] + mbs[100]) / 2)
    # the smallest tenth (1–2 MB) run 0.28–0.31 s, less the one held up: the floor
    assert 0.25 < pace.floor_seconds < 0.35
    # 1.0 s at 34.7 MB, 0.03 s less for each MB under: a merge of 1 KB runs what the smallest ran, not 0
    assert pace.run(1.0, 1000) == pace.floor_seconds


def test_a_merge_far_smaller_than_the_line_runs_the_smallest_merges_fixed_cost():
    # merges of 10 MB run 0.3 s, of 100–170 MB 0.3 + 0.02 s a MB over 10: the line gives a 1 KB merge 0.1 s
    samples = [(10 * MB, 0.3)] * 20 + [(mb * MB, 0.3 + 0.02 * (mb - 10)) for mb in range(100, 171, 4)] * 2
    pace = fit_pace(samples)
    assert pace is not None and pace.seconds_per_mb == pytest.approx(0.02) and pace.floor_seconds == 0.3
    at_reference = 0.3 + 0.02 * (pace.reference_mb - 10)
    assert pace.run(at_reference, 150 * MB) == pytest.approx(0.3 + 0.02 * 140)
    assert pace.run(at_reference, 1000) == 0.3  # the line: 0.1 s


def test_merges_of_a_few_kb_give_no_slope_from_their_jitter():
    rng = random.Random(3)
    # 1 KB to 1 MB, spread 1000×, runs 0.2–0.5 s at random: slopes of seconds a MB between any two
    samples = [(int(10 ** rng.uniform(3, 6)), rng.uniform(0.2, 0.5)) for _ in range(100)]
    pace = fit_pace(samples)
    assert pace is not None and pace.seconds_per_mb == 0.0


def test_merges_that_run_shorter_when_larger_give_no_negative_slope():
    samples = [(mb * MB, 5.0 - mb / 100) for mb in (1, 2, 5, 10, 50, 100, 200, 300, 400, 450)]
    pace = fit_pace(samples)
    assert pace is not None and pace.seconds_per_mb == 0.0


def test_a_run_grows_from_the_median_and_never_falls_under_the_floor():
    pace = SizePace(0.02, 10.0)
    assert pace.run(0.3, 10 * MB) == pytest.approx(0.3)
    assert pace.run(0.3, 110 * MB) == pytest.approx(2.3)
    assert pace.run(0.3, 0) == pytest.approx(0.1)  # 0.02 s shorter for each of the 10 MB under
    assert SizePace(0.05, 10.0).run(0.3, 0) == MIN_RUN_SECONDS  # 0.3 − 0.5: the floor


@pytest.mark.parametrize("slope, ref, floor", [(-0.1, 1.0, 0.1), (0.1, -1.0, 0.1), (float("nan"), 1.0, 0.1),
                                              (0.1, 1.0, 0.0)])
def test_a_nonsense_pace_is_refused(slope, ref, floor):
    with pytest.raises(ValueError, match="seconds_per_mb and reference_mb"):
        SizePace(slope, ref, floor_seconds=floor)


TARGET = 10 ** 12  # nothing is ever full: every partition written twice merges
TUNING = PolicyTuning(TARGET, cold_after_seconds=600.0)


def _landings(**kw: object) -> dict[int, float]:
    # partition 1 gets two files of 1 MB, partition 2 two of 500 MB; both decided at 1 s
    writes = [Write(0.0, ((1, MB), (2, 500 * MB))), Write(1.0, ((1, MB), (2, 500 * MB)))]
    landed: list[Merge] = []
    simulate_policy(writes, TUNING, latency=1.0, planner=merge_everything, start_delay=0.2,
                    on_merge=landed.append, **kw)
    return {m.partition: m.at for m in landed}


def test_with_a_pace_the_replay_lands_a_large_merge_later_than_a_small_one():
    assert _landings() == {1: pytest.approx(2.0), 2: pytest.approx(2.0)}  # no pace: both at the latency
    # a run of 0.8 s at 2 MB; 0.01 s per MB over it: the 1,000 MB merge runs 0.8 + 9.98 s
    paced = _landings(pace=SizePace(0.01, 2.0))
    assert paced[1] == pytest.approx(2.0) and paced[2] == pytest.approx(1.2 + 0.8 + 9.98)


def test_a_pace_without_a_start_is_refused():
    with pytest.raises(ValueError, match="a pace needs a start_delay"):
        simulate_policy([Write(0.0, ((1, MB),))], TUNING, latency=1.0, pace=SizePace(0.01, 1.0))
