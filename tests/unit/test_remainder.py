"""The cold finish's remainder and its home (``cold_absorb``): which file it takes, when it takes none, and
AutoAnalyze trying it where a history ends short of the bin-pack's end layout."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autooptimize.domain.goals import end_layout_holds
from autooptimize.domain.planning import PlanFile
from autooptimize.domain.policy import PolicyTuning, plan_partition
from autooptimize.domain.remainder import remainder_home
from autooptimize.domain.simulate import simulate_baseline, simulate_policy
from autooptimize.domain.suggest import suggest_tuning
from autooptimize.errors import InvalidArgument
from benchmarks.policy_sim import family_writes
from benchmarks.trace_family import member

MiB = 1 << 20
TARGET = 8 * MiB
COLD_DONE = 6 * MiB


def _files(sizes: list[int]) -> list[PlanFile]:
    return [PlanFile(f"s3://b/t/data/f{i:04d}.parquet", s) for i, s in enumerate(sizes)]


def _plan(sizes: list[int], absorb: bool):
    return plan_partition(_files(sizes), TARGET, TARGET // 4, cold=True, cold_absorb=absorb)


def _merged(plan, sizes: list[int]) -> list[int]:
    paths = {f.path for g in plan.plan.groups for f in g.files}
    return sorted(s for f, s in zip(_files(sizes), sizes, strict=True) if f.path in paths)


def test_a_lone_small_file_joins_the_smallest_nearly_full_file_it_fits_beside():
    sizes = [int(0.6 * MiB), int(6.4 * MiB), int(7.6 * MiB), 8 * MiB]
    assert _plan(sizes, False).rule == "nothing_to_merge"
    plan = _plan(sizes, True)
    assert plan.rule == "cold_absorb" and _merged(plan, sizes) == [int(0.6 * MiB), int(6.4 * MiB)]
    assert [tuple(g.output_sizes()) for g in plan.plan.groups] == [(int(0.6 * MiB) + int(6.4 * MiB),)]


def test_a_remainder_of_several_files_takes_a_home_only_where_it_fits_within_five_quarters():
    sizes = [MiB, MiB, int(7.9 * MiB)]  # 2 MiB beside 7.9: 9.9 MiB, within 10
    plan = _plan(sizes, True)
    assert plan.rule == "cold_absorb" and len(_merged(plan, sizes)) == 3
    too_big = [MiB, MiB, MiB, int(7.9 * MiB)]  # 3 MiB beside 7.9: over 10 MiB, so the plain finish
    plan = _plan(too_big, True)
    assert plan.rule == "cold_finish" and _merged(plan, too_big) == [MiB, MiB, MiB]


def test_no_home_when_the_finish_leaves_no_small_file_or_none_is_nearly_full():
    # the small files make ¾ of a target together: their own layout needs no home
    assert _plan([3 * MiB, 3 * MiB, int(7 * MiB)], True).rule == "cold_finish"
    # every other file is at the target or over it: nothing under it to join
    assert _plan([MiB, MiB, 8 * MiB, 9 * MiB], True).rule == "cold_finish"
    assert remainder_home([], [0], [7 * MiB], TARGET, COLD_DONE) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 12 * MiB), min_size=1, max_size=12))
def test_a_home_is_never_at_the_target_and_the_pair_never_passes_five_quarters(sizes):
    by_size = sorted(range(len(sizes)), key=sizes.__getitem__)
    group = [i for i in by_size if sizes[i] < COLD_DONE]
    home = remainder_home(group, by_size, sizes, TARGET, COLD_DONE)
    if home is None:
        return
    remainder = sum(sizes[i] for i in group)
    assert home not in group and COLD_DONE <= sizes[home] < TARGET and remainder < COLD_DONE
    assert sizes[home] + remainder <= TARGET * 5 // 4
    assert all(not (COLD_DONE <= sizes[i] < sizes[home]) or sizes[i] + remainder > TARGET * 5 // 4 for i in by_size)


def test_the_tuning_and_the_plan_refuse_a_flag_that_is_not_a_boolean():
    with pytest.raises(InvalidArgument, match="cold_absorb must be True or False"):
        PolicyTuning(TARGET, cold_absorb="yes")
    with pytest.raises(InvalidArgument, match="cold_absorb must be True or False"):
        plan_partition(_files([MiB, MiB]), TARGET, TARGET // 4, cold=True, cold_absorb=1)
    assert PolicyTuning(TARGET, cold_absorb=True).as_dict()["cold_absorb"] is True


def test_autoanalyze_turns_it_on_where_the_history_ends_short_of_the_binpacks_end_layout():
    m = member("m09")  # 8 MiB, daily, 1 MB an hour, 35 % late: the defaults end with a lone small file
    writes, default = family_writes(m), PolicyTuning(m.target)
    timing = {"latency": 0.35, "start_delay": 0.18, "timer_lag": 0.85}
    base = simulate_baseline(writes, m.target)
    assert not end_layout_holds(simulate_policy(writes, default, **timing), base)
    s = suggest_tuning(writes, default, candidates=[default], **timing)
    assert s.tuning == dataclasses.replace(default, cold_absorb=True) and s.tried == 2
    assert end_layout_holds(s.predicted, base) and s.meets_goal
    assert s.predicted.bytes_rewritten > s.defaults.bytes_rewritten  # what the end layout costs


def test_autoanalyze_leaves_it_off_where_the_end_layout_holds_without_it():
    m = member("m08")
    writes, default = family_writes(m)[:300], PolicyTuning(m.target)
    s = suggest_tuning(writes, default, candidates=[default], latency=0.35, start_delay=0.18)
    assert end_layout_holds(s.defaults, s.baseline) and s.tried == 1 and not s.tuning.cold_absorb
