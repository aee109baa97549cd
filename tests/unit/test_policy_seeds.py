"""benchmarks.policy_seeds and the family's variants: the policy on workloads its constants were not chosen
on."""

from __future__ import annotations

import json

import pytest

from autooptimize.domain.policy import PolicyTuning
from benchmarks import policy_seeds
from benchmarks.policy_sim import compare, family_writes
from benchmarks.trace_family import VARIANT_STRIDE, make_commits, member, variant


def test_a_variant_is_the_same_shape_from_another_seed():
    m = member("m00")
    assert variant(m, 0) is m
    v = variant(m, 2)
    assert v.name == f"{m.name}~2" and v.seed == m.seed + 2 * VARIANT_STRIDE
    assert (v.target, v.grain, v.bytes_per_hour, v.late_share, v.rate, v.commits) == (
        m.target, m.grain, m.bytes_per_hour, m.late_share, m.rate, m.commits)
    assert make_commits(v) != make_commits(m)
    assert make_commits(v) == make_commits(variant(m, 2))  # seeded
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="whole number"):
            variant(m, bad)  # type: ignore[arg-type]


def test_the_variant_where_one_small_file_held_an_hour_back_keeps_about_the_bin_packs_files():
    # m00's variant 2: a partition behind the newest held an 8.8 KB file and then files of 23 KB and more;
    # the priced rule's one prefix ended at the first file, and the first 300 commits kept 2.12× the
    # bin-pack's files (the whole trace 2.87×). With runs, 0.93×.
    v = variant(member("m00"), 2)
    r = compare(v.name, family_writes(v)[:300], PolicyTuning(v.target), 20, latency=0.45, start_delay=0.22,
                timer_lag=0.85, clock=True)
    assert r["ratio"]["mean_live_files"] <= 1.05, r["ratio"]
    assert r["policy"]["end_files"] <= r["baseline"]["end_files"]


def test_the_benchmark_reports_every_variant_and_what_held(capsys):
    assert policy_seeds.main(["--member", "m05", "--variants", "2", "--first", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [r["member"] for r in out["rows"]]
    assert names == [f"{member('m05').name}~1", f"{member('m05').name}~2"]
    s = out["summary"]
    held = [r for r in out["rows"] if r["ratio"]["mean_live_files"] <= policy_seeds.FILES_GOAL]
    assert s["workloads"] == 2 and s["files_goal_held"] == len(held)
    assert s["files_and_wa_goals_held"] <= s["files_goal_held"]
    assert all(r["policy"]["bytes_written"] > 0 and r["baseline"]["bytes_written"] > 0 for r in out["rows"])


def test_nothing_replayed_fails_and_nonsense_is_refused(capsys):
    assert policy_seeds.main(["--member", "nope"]) == 1
    assert "nothing replayed" in capsys.readouterr().out
    for bad in (["--variants", "0"], ["--first", "-1"], ["--start-delay", "1", "--latency", "0.5"]):
        with pytest.raises(SystemExit) as e:
            policy_seeds.main(bad)
        assert e.value.code == 2


def test_the_live_benchmark_takes_a_variant_of_an_hourly_member(capsys):
    from benchmarks import streaming

    args = streaming.parse_args(["--member", "m00", "--variant", "2", "--commits", "300"])
    assert args.family_member == variant(member("m00"), 2) and args.commits == 300
    trace = streaming.family_trace(args.family_member, args.seed, 30)
    assert len(trace) == 30 and trace != streaming.family_trace(member("m00"), args.seed, 30)
    with pytest.raises(SystemExit) as e:
        streaming.parse_args(["--member", "m00", "--variant", "-1"])
    assert e.value.code == 2 and "--member/--variant" in capsys.readouterr().err


def test_the_live_benchmark_sets_the_tables_own_tuning_as_track_options():
    from benchmarks import streaming

    args = streaming.parse_args(["--track", "merge-fan-in=12", "--track", "leave-alone-below=1MiB",
                                 "--track", "quiet-merge"])
    assert streaming.track_options(args) == ["--merge-fan-in", "12", "--leave-alone-below", "1MiB", "--quiet-merge"]
    assert streaming.track_options(streaming.parse_args([])) == []
    for bad in ("--track=--merge-fan-in=12", "Merge=1", "merge-fan-in=", "fan in=3"):
        with pytest.raises(SystemExit) as e:
            streaming.parse_args([bad] if bad.startswith("--") else ["--track", bad])
        assert repr(bad.removeprefix("--track=")) in str(e.value.code)


def test_the_live_benchmark_replays_a_daily_member_into_a_day_table():
    import pyarrow.compute as pc
    from pyiceberg.typedef import Record

    from benchmarks import streaming
    from benchmarks.trace import BASE_HOUR, DAY_SPEC, GRAINS, SCHEMA, SPEC, parse_part_label, rows_for

    args = streaming.parse_args(["--member", "m09", "--commits", "40"])
    assert args.grain == "day" and args.family_member == member("m09")
    assert streaming.parse_args(["--member", "m01"]).grain == "hour"
    assert streaming.parse_args([]).grain == "hour"
    trace = streaming.family_trace(args.family_member, args.seed, 40)
    day = BASE_HOUR // 24
    # 40 commits at 0.5/s are 80 s of a 24-minute day: every file lands in the first day
    assert len(trace) == 40 and {f.part for c in trace for f in c.files} == {day}
    assert all(f.span_hours == 24 for c in trace for f in c.files)
    # the bytes drawn are the family's own, file for file
    assert [sum(f.drawn_bytes for f in c.files) for c in trace] == [
        sum(b for _, b in c.files) for c in make_commits(member("m09"))[:40]]
    rows = rows_for(args.seed, 0, trace[0].files, trace[0].first_id)
    ts = pc.cast(rows.column("ts"), "int64").to_pylist()
    start = day * 24 * 3600 * 1_000_000
    assert all(start <= t < start + 24 * 3600 * 1_000_000 for t in ts)
    assert max(ts) - min(ts) > 3600 * 1_000_000  # spread over the day, not one hour of it
    assert GRAINS["day"][0] == DAY_SPEC
    # the labels Iceberg gives these partitions (the bin-pack's directories) parse back to their values
    assert DAY_SPEC.partition_to_path(Record(day), SCHEMA) == "ts_day=2026-03-02" and parse_part_label("2026-03-02") == day
    assert (SPEC.partition_to_path(Record(BASE_HOUR + 5), SCHEMA) == "ts_hour=2026-03-02-05"
            and parse_part_label("2026-03-02-05") == BASE_HOUR + 5)
    with pytest.raises(ValueError, match="partition label"):
        parse_part_label("2026-03")
    # an action's partition, in each form the service records it
    assert streaming.action_part(f"[{day}]", None) == day
    assert streaming.action_part("ts_day=2026-03-02", None) == day
    assert streaming.action_part(None, {"ts_day": day}) == day
    assert streaming.action_part("ts_hour=2026-03-02-05", None) == BASE_HOUR + 5
