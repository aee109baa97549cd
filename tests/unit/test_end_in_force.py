"""The end layout in a check, and the search judging the tuning in force's end layout on what the table did
(autooptimize.domain.goals.end_layout / end_shortfall, simulate's ``end_parts``,
autooptimize.domain.suggest.end_in_force, autooptimize.services.end_check.finished_partitions): on m06 a
tuning kept 5.0 MiB² of excess at the end, within the goal, where its own replay left 22.9 MiB², and the
search moved on from it."""

from __future__ import annotations

import dataclasses

import pytest

from autooptimize.domain.entropy import best_layout, end_layout
from autooptimize.domain.goals import END_EXCESS_SLACK, end_shortfall
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import Write, simulate_baseline, simulate_policy
from autooptimize.domain.suggest import (
    END_CHECKS,
    MIN_END_PARTITIONS,
    candidate_tunings,
    end_check_of,
    end_in_force,
    live_check_of,
    live_error,
    live_files_bias,
    suggest_tuning,
)
from autooptimize.services.end_check import FINISH_SLACK_SECONDS, finish_after, finished_partitions
from benchmarks.policy_sim import family_writes
from benchmarks.trace_family import member

MiB = 1 << 20


def test_the_end_layout_counts_files_and_the_excess_over_each_partitions_best_layout():
    target = 8 * MiB
    a, b = [3 * MiB, 3 * MiB], [8 * MiB, 1 * MiB]  # a: 6 MiB in two files (best: one); b: already at its best
    sse_a = 2 * (5 * MiB) ** 2 - best_layout(6 * MiB, target)[1]
    assert end_layout([a, b], target) == (4, sse_a / 4)
    assert end_layout([], target) == (0, 0.0)
    assert end_layout([b], target) == (2, 0.0)


@pytest.mark.parametrize(("files", "excess", "short"), [
    (11, 0.0, 0.0),  # 11 ≤ 1.1 × 10
    (22, 0.0, 1.0),  # twice the allowed files
    (10, 1.1 * 4 * END_EXCESS_SLACK + END_EXCESS_SLACK, 0.0),
    (10, 2 * (1.1 * 4 * END_EXCESS_SLACK + END_EXCESS_SLACK), 1.0),
])
def test_the_end_shortfall_sums_how_far_files_and_excess_exceed_their_limits(files, excess, short):
    assert end_shortfall(files, excess, 10, 4 * END_EXCESS_SLACK) == pytest.approx(short)
    assert end_shortfall(5, 0.0, 0, 0.0) == 0.0  # the bin-pack ended with none: files are not judged


def test_the_replays_end_layout_can_count_only_some_partitions():
    target = 4 * MiB
    writes = [Write(float(i), ((i % 3, MiB // 2 + i),)) for i in range(30)]
    tuning = PolicyTuning(target)
    whole = simulate_policy(writes, tuning, 0.5)
    some = simulate_policy(writes, tuning, 0.5, end_parts={0, 1})
    none = simulate_policy(writes, tuning, 0.5, end_parts=set())
    assert dataclasses.replace(some, end_files=whole.end_files, end_excess_mse=whole.end_excess_mse) == whole
    assert 0 < some.end_files < whole.end_files and (none.end_files, none.end_excess_mse) == (0, 0.0)
    base, base_some = simulate_baseline(writes, target), simulate_baseline(writes, target, end_parts={2})
    assert base_some.end_files < base.end_files and base_some.mean_live_files == base.mean_live_files


def test_a_partition_is_finished_when_written_since_the_check_began_and_not_for_its_finish_time():
    writes = [Write(0.0, (("old", 1),)), Write(10.0, (("a", 1), ("b", 1))), Write(50.0, (("b", 1),)),
              Write(95.0, (("c", 1),))]
    assert finished_partitions(writes, 5.0, 100.0, 60.0) == {"a"}  # b wrote at 50, c at 95; old before 5
    assert finished_partitions(writes, 5.0, 100.0, 5.0) == {"a", "b", "c"}
    assert finished_partitions(writes, 0.0, 100.0, 60.0) == {"old", "a"}
    tuning = PolicyTuning(MiB, cold_after_seconds=120.0)
    assert finish_after(tuning, 2.5) == 120.0 + 5.0 + FINISH_SLACK_SECONDS


def _end(partitions: object, realised: object) -> dict[str, object]:
    return {"end": {"partitions": partitions, "shortfall": {"predicted": 0.3, "realised": realised}}}


@pytest.mark.parametrize(("check", "value"), [
    (None, None), ({}, None), ({"end": None}, None),
    (_end(MIN_END_PARTITIONS, 0.0), 0.0), (_end(40, 0.25), 0.25),
    (_end(MIN_END_PARTITIONS - 1, 0.0), None),  # too few finished partitions: the replay's stands
    (_end("3", 0.0), None), (_end(5, "0"), None), (_end(5, -1.0), None), (_end(5, None), None),
])
def test_the_end_in_force_is_the_checks_realised_shortfall_on_enough_finished_partitions(check, value):
    assert end_in_force(check) == value


def test_the_end_in_force_comes_from_the_newest_check_of_the_same_tuning_that_saw_partitions_finished():
    """A second ``whatif --suggest`` right after a first checks no commits (no check), and a check of a short
    window may see no partition finished: neither undoes what the newest check of the tuning in force saw."""
    in_force, other = PolicyTuning(32 * MiB, price=32, cold_after_seconds=300.0), PolicyTuning(32 * MiB)

    def check(tuning: PolicyTuning, partitions: object, realised: float, since: int) -> dict[str, object]:
        return {**_end(partitions, realised), "tuning": tuning.as_dict(), "since_ms": since}
    held, missed = check(in_force, 5, 0.0, 3), check(in_force, 4, 0.4, 1)
    few, elsewhere = check(in_force, MIN_END_PARTITIONS - 1, 0.9, 4), check(other, 5, 0.7, 5)
    assert end_check_of([None, held, missed], in_force) is held  # no check of its own now: the newest on record
    assert end_check_of([elsewhere, few, held, missed], in_force) is held  # another tuning's; too few finished
    assert end_check_of([missed, held], in_force) is missed  # the newest that qualifies, whatever it says
    assert end_check_of([elsewhere, few, {"tuning": in_force.as_dict(), "end": None}], in_force) is None
    assert end_check_of([elsewhere], other) is elsewhere and end_check_of([held], other) is None
    assert end_check_of([*[None] * (END_CHECKS - 1), held], in_force) is held
    assert end_check_of([*[None] * END_CHECKS, held], in_force) is None  # looked back END_CHECKS checks at most
    stored = {**held, "tuning": {**in_force.as_dict(), "cold_after_seconds": 300}}  # JSON may give back an int
    assert end_check_of([stored], in_force) is stored
    assert end_in_force(end_check_of([None, missed], in_force)) == 0.4


def _search(writes, default, cands, **kw):
    return suggest_tuning(writes, default, cands, latency=0.45, start_delay=0.22, **kw)


def test_a_tuning_in_force_whose_replay_misses_the_end_goal_stays_when_the_table_held_it():
    """m00's first 200 commits: the defaults keep the live-file goal with the fewest bytes, but their replay ends
    at 20.4 MiB² of excess against the limit 16.8 (the bin-pack's 14.3 × 1.1 + 1), so the search takes a
    tuning that rewrites more; when the table's check says the defaults held their end layout, they stay."""
    m = member("m00")
    writes, default = family_writes(m)[:200], PolicyTuning(m.target)
    cands = candidate_tunings(default, fan_ins=(4, 12, 32), cold_after=(30.0, 60.0), quiet_merge=(False,),
                              prices=(16, 32))[:2]
    plain = _search(writes, default, cands)
    assert plain.tuning != default and plain.meets_goal and plain.end_in_force is None
    assert plain.defaults.bytes_rewritten < plain.predicted.bytes_rewritten  # the defaults were cheaper

    held = _search(writes, default, cands, end_in_force=0.0)
    assert held.tuning == default and held.meets_goal and held.predicted == plain.defaults
    assert held.as_dict()["end_in_force"] == 0.0
    missed = _search(writes, default, cands, end_in_force=0.2)  # the table missed it too: the replay was right
    assert missed.tuning == plain.tuning and missed.end_in_force == 0.2


def test_a_tuning_in_force_whose_replay_holds_the_end_goal_is_left_when_the_table_missed_it():
    m = member("m01")
    writes, default = family_writes(m)[:240], PolicyTuning(m.target)
    cands = candidate_tunings(default, fan_ins=(4, 12, 32), cold_after=(60.0,), quiet_merge=(False,), prices=(16, 32))
    in_force = _search(writes, default, cands).tuning
    kept = _search(writes, in_force, cands)
    assert kept.tuning == in_force and kept.meets_goal  # its replay holds every goal: it stays

    missed = _search(writes, in_force, cands, end_in_force=0.5)
    assert missed.tuning != in_force and missed.meets_goal  # another keeps the goal in its replay
    assert missed.predicted.bytes_rewritten >= kept.predicted.bytes_rewritten  # never for fewer bytes
    # a tuning that misses is still ranked by how far: judged on the table's shortfall, not the replay's
    assert not _search(writes, in_force, [in_force], end_in_force=0.5).meets_goal


def _live(tuning: PolicyTuning, commits: int, error: float, merged: int = 1, since: int = 0) -> dict[str, object]:
    return {"tuning": tuning.as_dict(), "commits": commits, "since_ms": since,
            "relative_error": {"mean_live_files": error}, "realised": {"bytes_rewritten": merged}}


def test_the_live_files_in_force_come_from_the_newest_check_of_that_tuning_over_enough_commits():
    in_force, other = PolicyTuning(128 * MiB, fan_in=24, quiet_merge=True, price=0), PolicyTuning(128 * MiB)
    fewer, more = _live(in_force, 480, -0.058, since=2), _live(in_force, 300, 0.04, since=1)
    short, idle = _live(in_force, 40, -0.3, since=3), _live(in_force, 480, -0.5, merged=0, since=4)
    assert live_error(fewer) == -0.058 and live_error(more) == 0.04
    assert live_error(idle) is None and live_error(None) is None  # nothing merged: says nothing of the replay
    assert live_error(_live(in_force, 480, -1.0)) is None and live_error({"relative_error": {}}) is None
    assert live_files_bias(fewer) == 1.0 and live_files_bias(more) == 1.04  # the margin only tightens
    assert live_check_of([short, idle, fewer, more], in_force) is fewer  # too short; nothing merged
    assert live_check_of([short], in_force, commits=40) is short  # a history of 40 commits asks no more
    assert live_check_of([_live(other, 480, -0.2), more], in_force) is more  # another tuning's is not its
    assert live_check_of([None, short, idle], in_force) is None


def test_a_tuning_in_force_whose_replay_misses_the_live_files_goal_stays_when_the_table_kept_fewer():
    """m01's first 240 commits: fan-in 32 under the tiers rewrites the fewest bytes, but its replay keeps
    1.33× the bin-pack's files. Where the table kept 0.75× what that replay said, it stays; at 0.8× it does not."""
    m = member("m01")
    writes, default = family_writes(m)[:240], PolicyTuning(m.target)
    cands = candidate_tunings(default, fan_ins=(4, 12, 32), cold_after=(60.0,), quiet_merge=(False,), prices=(16, 32))
    in_force = next(t for t in cands if t.fan_in == 32 and t.cold_gap_factor)
    plain = _search(writes, in_force, cands)
    assert plain.tuning != in_force and plain.meets_goal and plain.live_in_force is None
    assert plain.defaults.mean_live_files > 1.3 * plain.baseline.mean_live_files
    assert plain.defaults.bytes_rewritten < plain.predicted.bytes_rewritten  # it was the cheapest

    kept = _search(writes, in_force, cands, live_in_force=0.75)
    assert kept.tuning == in_force and kept.meets_goal and kept.predicted == plain.defaults
    assert kept.as_dict()["live_in_force"] == 0.75
    assert _search(writes, in_force, cands, live_in_force=0.8).tuning == plain.tuning  # 1.066×: still over
    # only the tuning in force is judged on what the table kept: the margin still weighs the rest
    assert _search(writes, default, cands, live_in_force=0.75).tuning == plain.tuning
    with pytest.raises(ValueError, match="live_in_force"):
        _search(writes, in_force, cands, live_in_force=0.0)
    # a table that kept 2.5× what its replay said (over the margin's cap of 2): judged on that, not refused
    assert not _search(writes, default, cands[:1], live_in_force=2.5).meets_goal  # 0.70× its replay × 2.5
    assert live_error(_live(in_force, 480, 1.5)) == 1.5

