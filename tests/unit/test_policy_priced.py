"""benchmarks.policy_priced: the priced live rule tried in the simulator through its planner hook."""

from __future__ import annotations

import json

import pytest

from autooptimize.domain.planning import PlanFile
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import PartitionState, Write, simulate_policy
from autooptimize.domain.time_spans import Spans, TimePartition
from benchmarks import policy_priced
from benchmarks.policy_priced import priced_planner
from benchmarks.policy_sim import streaming_writes

MiB = 1 << 20
KiB = 1 << 10
TUNING = PolicyTuning(8 * MiB)


def _state(sizes, *, newest=True, cold=False, received=None, expected=None):  # type: ignore[no-untyped-def]
    files = [PlanFile(f"w{i}", s) for i, s in enumerate(sizes)]
    return PartitionState(TimePartition(0, 1, "[1]"), files, TUNING, cold, newest, sum(sizes) if received is None else received,
                          8 * MiB if expected is None else expected)


def _merged(got):  # type: ignore[no-untyped-def]
    plan, rule = got
    return rule, [sorted(f.path for f in g.files) for g in plan.groups]


def test_small_files_weighing_the_fill_share_are_packed_largest_first_into_one_file_of_at_most_five_quarters():
    sizes = [4 * MiB, 3 * MiB, 2 * MiB, 1 * MiB, 100 * KiB]  # 10.1 MiB under ¾ of the target: over 15/16 of it
    rule, groups = _merged(priced_planner(32, 2)(_state(sizes)))
    assert rule == "filled"
    assert groups == [["w0", "w1", "w2", "w3"]]  # 10 MiB fits 5/4 × 8 MiB; the 100 KiB file would not
    # under 15/16 of a target (7.4 MiB) nothing is packed: the newest hour is priced instead
    assert _merged(priced_planner(32, 2)(_state([3 * MiB, 3 * MiB, 1 * MiB + 400 * KiB])))[0] != "filled"


def test_in_the_newest_partition_a_prefix_merges_only_while_the_files_it_saves_are_worth_its_bytes():
    sizes = [100 * KiB] * 6  # life = (8 MiB − 600 KiB) / κ per file saved; six: NEWEST_MIN_FILES
    rule, groups = _merged(priced_planner(32, 2)(_state(sizes)))
    assert rule == "priced" and groups == [[f"w{i}" for i in range(6)]]  # 5 × 237 KiB > 600 KiB
    plan, rule = priced_planner(1000, 2)(_state(sizes))  # 5 × 7.6 KiB < 600 KiB: wait
    assert rule == "priced_wait" and plan.is_empty


def test_a_file_more_than_ratio_times_the_bytes_before_it_ends_the_prefix():
    six = [f"w{i}" for i in range(6)]
    sizes = [100 * KiB] * 6 + [1500 * KiB]  # 1,500 > 2 × 600: the seventh stays
    assert _merged(priced_planner(2, 2)(_state(sizes))) == ("priced", [six])
    assert _merged(priced_planner(2, 2.5)(_state(sizes))) == ("priced", [[*six, "w6"]])
    # allowed by the ratio but not worth it: one more file saved (761 KiB at κ8) for 1,500 KiB more read
    assert _merged(priced_planner(8, 2.5)(_state(sizes))) == ("priced", [six])


def test_a_partition_behind_the_newest_merges_its_whole_prefix_at_once():
    sizes = [10 * KiB, 10 * KiB, 15 * KiB]
    assert _merged(priced_planner(10_000, 2)(_state(sizes, newest=False))) == ("priced", [["w0", "w1", "w2"]])
    plan, rule = priced_planner(10_000, 2)(_state(sizes))  # the same files in the newest: not worth it
    assert rule == "priced_wait" and plan.is_empty


def test_cold_or_small_partitions_are_left_to_the_policy_unless_everywhere():
    sizes = [100 * KiB] * 4
    assert priced_planner(32, 2)(_state(sizes, cold=True)) is None
    small = _state(sizes, expected=1 * MiB)  # neither received nor expected a target's bytes
    assert priced_planner(32, 2)(small) is None
    assert priced_planner(32, 2, everywhere=True)(small) is not None


def test_nonsense_settings_are_refused():
    for args in ((0, 2), (32, 0.5), (32, 2, 0.0)):
        with pytest.raises(ValueError):
            priced_planner(*args)


def _hours(n: int = 200) -> list[Write]:
    """Two writes a second into the current hour (a new hour each 60 writes), a late file each fifth."""
    out = []
    for k in range(n):
        hour = k // 60
        files = [(TimePartition(0, hour, f"[{hour}]"), 150 * KiB + 7 * KiB * (k % 5))]
        if k % 5 == 0 and hour:
            files.append((TimePartition(0, hour - 1, f"[{hour - 1}]"), 20 * KiB))
        out.append(Write(k / 2, tuple(files)))
    return out


def test_a_planner_that_always_defers_replays_exactly_as_the_policy():
    writes = _hours()
    plain = simulate_policy(writes, TUNING, 1.0)
    deferred = simulate_policy(writes, TUNING, 1.0, planner=lambda state: None)
    assert plain.bytes_rewritten > 0
    assert (plain.mean_live_files, plain.bytes_rewritten, plain.end_files) == (
        deferred.mean_live_files, deferred.bytes_rewritten, deferred.end_files)


def test_the_planner_sees_the_newest_hour_of_the_spec_as_newest():
    spans = Spans()
    spans.extend([TimePartition(0, 5, "[5]"), TimePartition(0, 4, "[4]")])
    assert spans.is_newest(TimePartition(0, 5, "[5]")) and not spans.is_newest(TimePartition(0, 4, "[4]"))
    assert spans.is_newest("region=eu")  # no time field: nothing says it is done being written
    spans.extend([TimePartition(0, 6, "[6]")])
    assert not spans.is_newest(TimePartition(0, 5, "[5]"))

    judged: list[tuple[int, bool]] = []

    def spy(state: PartitionState) -> None:
        judged.append((state.partition.ordinal, state.newest))
        return None

    simulate_policy(_hours(200), TUNING, 1.0, planner=spy)
    newest_run = [h for h, newest in judged if newest]
    assert sorted(set(newest_run)) == [0, 1, 2, 3] and newest_run == sorted(newest_run)  # each hour once newest
    assert {h for h, newest in judged if not newest} >= {0, 1, 2}  # and judged again behind it (late files)


def test_the_priced_rule_replays_and_rewrites_less_than_the_bin_pack(capsys):
    assert policy_priced.main(["--seed", "7", "--commits", "120", "--latency", "1", "--price", "32",
                               "--ratio", "2", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    (priced,) = row["priced"]
    assert 0 < priced["bytes_rewritten"] < row["binpack"]["bytes_rewritten"]
    with pytest.raises(SystemExit):
        policy_priced.main(["--price", "-1"])


def test_jittered_commits_keep_their_files_and_order_and_land_within_the_jitter():
    writes = streaming_writes(7, 60)
    moved = policy_priced.jittered(writes, 0.3, 11)
    assert [w.files for w in moved] == [w.files for w in writes]
    assert all(0 <= m.at - w.at < 0.3 + 0.001 * len(writes) for m, w in zip(moved, writes, strict=True))
    assert all(a.at < b.at for a, b in zip(moved, moved[1:], strict=False))
    assert moved != writes and policy_priced.jittered(writes, 0.3, 11) == moved  # seeded
    assert policy_priced.jittered(writes, 0.0, 11) == writes


def test_jittered_replays_are_averaged_and_nonsense_is_refused(capsys):
    writes = streaming_writes(7, 120)
    report = policy_priced.trace_report("seed 7", writes, 8 * MiB, 0.5, [(20.0, 2.0)], policy_priced.SERVICE_FILL,
                                        False, jitter=0.3, repeats=3)
    singles = [policy_priced.trace_report("seed 7", policy_priced.jittered(writes, 0.3, 1000 * k + 7), 8 * MiB, 0.5,
                                          [(20.0, 2.0)], policy_priced.SERVICE_FILL, False)["priced"][0]
               for k in range(3)]
    mean = sum(p["write_amplification"] for p in singles) / 3
    assert report["repeats"] == 3 and report["priced"][0]["write_amplification"] == pytest.approx(mean, abs=1e-4)
    assert policy_priced.main(["--seed", "7", "--commits", "120", "--latency", "0.5", "--price", "20",
                               "--ratio", "2", "--jitter", "0.3", "--repeats", "2", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["jitter"] == 0.3 and row["repeats"] == 2
    for bad in (["--jitter", "-1"], ["--jitter", "0.3", "--repeats", "0"]):
        with pytest.raises(SystemExit):
            policy_priced.main(bad)


def test_the_output_ratio_reaches_the_replay_and_nonsense_is_refused():
    writes = streaming_writes(7, 120)
    same = policy_priced.trace_report("seed 7", writes, 8 * MiB, 0.8, [(20.0, 2.0)], policy_priced.SERVICE_FILL, False)
    thin = policy_priced.trace_report("seed 7", writes, 8 * MiB, 0.8, [(20.0, 2.0)], policy_priced.SERVICE_FILL, False,
                                      output_ratio=0.5)
    assert thin["output_ratio"] == 0.5 and same["output_ratio"] == 1.0
    # merged files half the size: both replays change
    assert thin["binpack"]["bytes_rewritten"] != same["binpack"]["bytes_rewritten"]
    assert thin["priced"][0] != same["priced"][0]
    for bad in ("0", "-1", "3"):
        with pytest.raises(SystemExit):
            policy_priced.main(["--output-ratio", bad])


def test_the_start_delay_reaches_both_replays_and_nonsense_is_refused(capsys):
    writes = streaming_writes(7, 120)
    at_land = policy_priced.trace_report("seed 7", writes, 8 * MiB, 0.8, [(20.0, 2.0)], policy_priced.SERVICE_FILL,
                                         False)
    at_start = policy_priced.trace_report("seed 7", writes, 8 * MiB, 0.8, [(20.0, 2.0)], policy_priced.SERVICE_FILL,
                                          False, start_delay=0.3)
    assert at_start["start_delay"] == 0.3 and at_land["start_delay"] is None
    # merges planned before the files written while they run: the defaults and the variant both change
    assert at_start["defaults"] != at_land["defaults"] and at_start["priced"][0] != at_land["priced"][0]
    assert at_start["binpack"] == at_land["binpack"]  # the blocking bin-pack has no latency
    assert policy_priced.main(["--seed", "7", "--commits", "120", "--latency", "0.8", "--price", "20", "--ratio", "2",
                               "--start-delay", "0.3"]) == 0
    assert "each merge plans 0.3 s after its decision" in capsys.readouterr().out
    for bad in ("-0.1", "0.9"):
        with pytest.raises(SystemExit):
            policy_priced.main(["--latency", "0.8", "--start-delay", bad])
