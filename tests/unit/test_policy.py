"""The merge policy for live partitions and the excess rule: invariants, the late-file case, errors."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autooptimize.domain.checks import bounded_float
from autooptimize.domain.entropy import (
    EntropyStats,
    best_layout,
    excess_needs_attention,
    excess_over_best,
    needs_attention,
)
from autooptimize.domain.planning import PlanFile
from autooptimize.domain.policy import (
    ABSORB_RATIO,
    COLD_FLOOR_SECONDS,
    LIVE_LARGE_DIVISOR,
    SKIP_RULES,
    TINY_DIVISOR,
    TINY_FAN_IN,
    PolicyPlan,
    PolicyTuning,
    capped_bytes,
    is_live,
    partition_cold_after,
    partition_scale,
    plan_partition,
)
from autooptimize.errors import InvalidArgument

MiB = 1 << 20
KiB = 1 << 10
KB = 1000
S = 128 * MiB
T = S // 4
FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def files_of(sizes: Sequence[int]) -> list[PlanFile]:
    return [PlanFile(f"s3://b/t/data/f{i:04d}.parquet", s) for i, s in enumerate(sizes)]


def excess_attention_of(sizes: Sequence[int], target: int, tolerance: int) -> bool:
    stats = EntropyStats.from_sizes(sizes, target)
    return excess_needs_attention(stats.sse, stats.n, capped_bytes(sizes, target), target, tolerance)


def sizes_after(result: PolicyPlan, files: Sequence[PlanFile]) -> list[int]:
    grouped = {f.path for g in result.plan.groups for f in g.files}
    return [f.size for f in files if f.path not in grouped] + [
        s for g in result.plan.groups for s in g.output_sizes()
    ]


def test_best_layout() -> None:
    assert best_layout(0, 100) == (0, 0)
    assert best_layout(100, 100) == (1, 0)
    assert best_layout(250, 100) == (3, 50 * 50)
    assert best_layout(30, 100) == (1, 70 * 70)
    with pytest.raises(InvalidArgument, match="total_bytes"):
        best_layout(-1, 100)
    with pytest.raises(InvalidArgument, match="target"):
        best_layout(10, 0)


def test_a_small_merged_hour_is_quiet_but_a_late_file_beside_it_is_not() -> None:
    hour = 10 * 1000 * KB
    assert needs_attention(*_sse_n([hour]), T)  # the old rule punishes it forever
    assert not excess_attention_of([hour], S, T)
    assert excess_attention_of([hour, 100 * KB], S, T)  # one file too many
    assert excess_over_best(0, 3 * S // 2, S) < 0  # an oversized file absorbs the remainder


def _sse_n(sizes: Sequence[int]) -> tuple[int, int]:
    stats = EntropyStats.from_sizes(sizes, S)
    return stats.sse, stats.n


def test_one_late_file_never_rewrites_the_merged_hour_while_written_to() -> None:
    files = files_of([10 * 1000 * KB, 100 * KB])
    for fan_in in (2, 4, 8, 16):
        result = plan_partition(files, S, T, cold=False, fan_in=fan_in, received_bytes=10_100 * KB)
        assert result.attention and result.plan.is_empty and result.rule == "live_wait"


def test_cold_finishes_the_hour_once_into_its_best_layout() -> None:
    files = files_of([10 * 1000 * KB, 100 * KB, 300 * KB])
    result = plan_partition(files, S, T, cold=True)
    assert result.rule == "cold_finish"
    assert result.plan.files_in == 3 and result.plan.files_after == 1
    assert result.plan.bytes_rewritten == 10_400 * KB  # the cost the plan reports
    assert not excess_attention_of(sizes_after(result, files), S, T)
    done = plan_partition(files_of([10_400 * KB]), S, T, cold=True)
    assert (done.rule, done.plan.is_empty) == ("below_excess", True)


def test_quiet_merges_tiers_and_stragglers_into_one_group_but_not_the_hour_for_one_late_file() -> None:
    sizes = [1600 * KB] * 7 + [200 * KB] * 4
    result = plan_partition(files_of(sizes), S, T, cold=False, quiet=True)
    assert result.rule == "quiet_full"
    assert result.plan.files_in == 11 and result.plan.files_after == 1
    late = plan_partition(files_of([10 * 1000 * KB, 100 * KB]), S, T, cold=False, quiet=True)
    assert (late.rule, late.plan.is_empty) == ("live_wait", True)  # waits: for late bytes, or the cold finish
    assert plan_partition(files_of([10 * 1000 * KB, 100 * KB]), S, T, cold=True, quiet=True).rule == "cold_finish"


def test_live_merges_a_full_tier_and_leaves_merged_files_alone() -> None:
    sizes = [200 * KB + i for i in range(8)] + [1600 * KB, 1650 * KB, 100 * MiB]
    result = plan_partition(files_of(sizes), S, T, cold=False, fan_in=8)
    assert result.rule == "tiered"
    assert [sorted(f.size for f in g.files) for g in result.plan.groups] == [sizes[:8]]
    assert plan_partition(files_of(sizes[:3] + sizes[10:]), S, T, cold=False, fan_in=8).rule == "live_wait"


def test_tiers_are_cut_against_the_partition_not_the_target() -> None:
    """Issue 25: at 128 MiB every file of a 10 MB hour was "tiny" (under target / 8), so everything
    merged at fan-in 4 and each byte was rewritten about log4(files) times. Against the hour's own
    scale only a trickle is tiny."""
    hour = [400 * KB + i for i in range(TINY_FAN_IN)]  # 4 on-time files of a 10 MB hour
    assert sum(hour) < S // TINY_DIVISOR
    with_history = plan_partition(files_of(hour), S, T, cold=False, fan_in=12, expected_bytes=10 * 1000 * KB)
    assert with_history.rule == "live_wait"  # 1.6 MB is not tiny against a 10 MB hour
    assert plan_partition(files_of(hour), S, T, cold=False, fan_in=12).rule == "tiered"  # no history: the target
    trickle = [20 * KB + i for i in range(TINY_FAN_IN)]  # late files: tiny against the same hour
    assert plan_partition(files_of(trickle + [8 * MiB]), S, T, cold=False, fan_in=12,
                          expected_bytes=10 * 1000 * KB).rule == "tiered"
    assert partition_scale(S, 3 * MiB, 10 * MiB) == 10 * MiB
    assert partition_scale(S, 300 * MiB, None) == S
    assert partition_scale(S, None, None) == S


def test_tiny_files_merge_at_the_tiny_fan_in_and_larger_ones_wait_for_fan_in() -> None:
    target = 8 * MiB
    tiny = [70 * KB + i for i in range(TINY_FAN_IN)]  # a late trickle: together under target // TINY_DIVISOR
    result = plan_partition(files_of(tiny + [4 * MiB]), target, target // 4, cold=False, fan_in=12)
    assert result.rule == "tiered"
    assert [sorted(f.size for f in g.files) for g in result.plan.groups] == [tiny]
    assert plan_partition(files_of(tiny[:-1] + [4 * MiB]), target, target // 4, cold=False,
                          fan_in=12).rule == "live_wait"
    larger = [300 * KB + i for i in range(11)]  # over target // TINY_DIVISOR together: fan_in applies
    assert sum(larger[:TINY_FAN_IN]) >= target // TINY_DIVISOR
    assert plan_partition(files_of(larger), target, target // 4, cold=False, fan_in=12).rule == "live_wait"
    assert plan_partition(files_of(larger + [300 * KB + 99]), target, target // 4, cold=False,
                          fan_in=12).rule == "tiered"


def test_a_small_partition_may_be_left_alone() -> None:
    files = files_of([100 * KB] * 20)
    left = plan_partition(files, S, T, cold=True, leave_alone_below=4 * MiB)
    assert (left.rule, left.attention, left.plan.is_empty) == ("left_alone", True, True)
    assert plan_partition(files, S, T, cold=True, leave_alone_below=1 * MiB).rule == "cold_finish"


def test_a_best_layout_partition_is_left_alone() -> None:
    for cold in (True, False):
        result = plan_partition(files_of([S, 2 * S, 5 * MiB]), S, T, cold=cold)
        assert (result.rule, result.attention, result.plan.is_empty) == ("below_excess", False, True)


def test_bad_arguments_are_named() -> None:
    files = files_of([1, 2])
    with pytest.raises(InvalidArgument, match="fan_in"):
        plan_partition(files, S, T, cold=False, fan_in=1)
    with pytest.raises(InvalidArgument, match="fan_in"):
        plan_partition(files, S, T, cold=False, fan_in=3, min_input_files=4)
    with pytest.raises(InvalidArgument, match="cold"):
        plan_partition(files, S, T, cold=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="min_input_files"):
        plan_partition(files, S, T, cold=False, min_input_files=1)
    with pytest.raises(InvalidArgument, match="tolerance"):
        plan_partition(files, S, -1, cold=False)
    with pytest.raises(InvalidArgument, match="expected_bytes"):
        plan_partition(files, S, T, cold=False, expected_bytes=-5)
    with pytest.raises(InvalidArgument, match="leave_alone_below"):
        plan_partition(files, S, T, cold=False, leave_alone_below=-1)
    with pytest.raises(InvalidArgument, match="rule"):
        PolicyPlan(plan_partition(files, S, T, cold=False).plan, "sometimes", False)
    with pytest.raises(InvalidArgument, match="settle_seconds"):
        is_live(1.0, -1)
    with pytest.raises(InvalidArgument, match="cold_after_seconds"):
        PolicyTuning(S, settle_seconds=10, cold_after_seconds=5)
    with pytest.raises(InvalidArgument, match="fan_in"):
        PolicyTuning(S, fan_in=1)
    assert PolicyTuning(S).tolerance == S // 4


def test_bounded_float_takes_numbers_and_their_text_and_names_what_is_valid() -> None:
    assert bounded_float("2.5", 0, 10, "k must be from 0 to 10") == 2.5
    assert bounded_float(0, 0, 10, "k must be from 0 to 10") == 0.0
    for bad in ("soon", None, float("nan"), -1, 11, "1e9"):
        with pytest.raises(InvalidArgument, match=r"^k must be from 0 to 10 \(got "):
            bounded_float(bad, 0, 10, "k must be from 0 to 10")


def test_is_live() -> None:
    assert is_live(0.5, 3.0) and not is_live(3.0, 3.0)


def test_a_partition_whose_writes_came_close_together_goes_cold_sooner() -> None:
    assert COLD_FLOOR_SECONDS == 5.0
    # k × the longest of the newest three gaps, the fourth gap is forgotten
    assert partition_cold_after(60.0, [2.0, 7.5, 1.0, 30.0], 4.0) == 30.0
    assert partition_cold_after(60.0, [0.2, 0.3], 4.0) == 5.0  # never under the floor
    assert partition_cold_after(60.0, [0.2], 4.0, settle_seconds=8.0) == 8.0  # nor under the settle time
    assert partition_cold_after(60.0, [20.0], 4.0) == 60.0  # never later than the table's
    assert partition_cold_after(3.0, [0.1], 4.0) == 3.0  # a table colder sooner than the floor keeps its own
    # no gap yet (one write so far), or the factor off: the table's time
    assert partition_cold_after(60.0, None) == partition_cold_after(60.0, []) == 60.0
    assert partition_cold_after(60.0, [1.0], 0.0) == 60.0
    assert PolicyTuning(S).cold_after([1.0, 2.0]) == 8.0
    assert PolicyTuning(S, cold_gap_factor=0.0).cold_after([1.0, 2.0]) == PolicyTuning(S).cold_after_seconds
    with pytest.raises(InvalidArgument, match="gap factor"):
        partition_cold_after(60.0, [1.0], -1.0)
    with pytest.raises(InvalidArgument, match="gaps between writes"):
        partition_cold_after(60.0, [1.0, -2.0], 4.0)
    with pytest.raises(InvalidArgument, match="cold_gap_factor"):
        PolicyTuning(S, cold_gap_factor=float("nan"))


small = 1000  # target in the random worlds
sizes_st = st.lists(
    st.one_of(st.integers(1, small // 20), st.integers(1, small), st.integers(small, 3 * small)),
    min_size=0,
    max_size=40,
)


@FAST
@given(sizes_st, st.integers(0, small), st.integers(0, 2 * small), st.integers(0, 5 * small))
def test_excess_rule_only_quiets(sizes: list[int], tolerance: int, sse_extra: int, b: int) -> None:
    stats = EntropyStats.from_sizes(sizes, small)
    if excess_needs_attention(stats.sse, stats.n, b, small, tolerance):
        assert needs_attention(stats.sse, stats.n, tolerance)
    assert not excess_needs_attention(*best_layout(b, small)[::-1], b, small, tolerance) or tolerance == 0


@FAST
@given(sizes_st, st.integers(0, small), st.sampled_from(["live", "quiet", "cold"]), st.integers(2, 12),
       st.integers(2, 4), st.one_of(st.none(), st.integers(0, 4 * small)))
def test_policy_invariants(sizes: list[int], tolerance: int, state: str, fan_in: int, min_input: int,
                           expected: int | None) -> None:
    fan_in = max(fan_in, min_input)
    files = files_of(sizes)
    cold = state == "cold"
    result = plan_partition(files, small, tolerance, cold=cold, quiet=state == "quiet", fan_in=fan_in,
                            min_input_files=min_input, received_bytes=sum(sizes), expected_bytes=expected)
    paths = [f.path for g in result.plan.groups for f in g.files]
    assert len(paths) == len(set(paths)) and set(paths) <= {f.path for f in files}
    assert result.attention == excess_attention_of(sizes, small, tolerance)
    assert result.plan.is_empty or result.attention
    assert result.plan.is_empty == (result.rule in SKIP_RULES)
    scale = partition_scale(small, sum(sizes), expected)
    for g in result.plan.groups:
        assert len(g.files) >= min_input
        members = sorted(f.size for f in g.files)
        assert members[-1] < small * 3 // 4, "a file at or above 3/4 of the target is never rewritten"
        if state == "live":
            assert members[-1] < scale // LIVE_LARGE_DIVISOR
            assert members[-1] <= sum(members[:-1]), "written to: no file above the rest of its group"
        elif state == "quiet":
            assert members[-1] < small // 2
            assert all(s <= min(fan_in, ABSORB_RATIO) * sum(members[:k]) for k, s in enumerate(members) if k)
    if result.rule == "cold_finish":  # the bin-pack's end layout: at most one file under 3/4 of the target
        assert sum(1 for x in sizes_after(result, files) if x < small * 3 // 4) <= 1


def test_the_merge_runs_a_tier_as_chosen_and_never_grows_it_with_the_merged_file_beside_it():
    """Found by benchmarks.streaming: output balancing grew each live tier of eight small files with the
    partition's earlier merged output (the "smallest spare file" under the band), so every live merge
    rewrote that file again and write amplification reached 2.8."""
    from autooptimize.domain.planning import balance_outputs

    target = 8 * MiB
    merged = PlanFile("merged", 3 * MiB)
    small = [PlanFile(f"s{i}", 200 * KiB + i) for i in range(8)]
    files = [merged, *small]
    chosen = plan_partition(files, target, target // 4, cold=False, fan_in=8)
    assert chosen.rule == "tiered"
    assert {f.path for g in chosen.plan.groups for f in g.files} == {f.path for f in small}
    grown = balance_outputs(chosen.plan, files)  # the band-filling reshape that bin packing uses
    assert "merged" in {f.path for g in grown.groups for f in g.files}
    kept = balance_outputs(chosen.plan, files, grow=False)
    assert {f.path for g in kept.groups for f in g.files} == {f.path for f in small}
