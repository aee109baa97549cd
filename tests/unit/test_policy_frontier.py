"""benchmarks.policy_frontier: the Pareto frontier of the policy's tunings and what it reports per trace."""

from __future__ import annotations

from autooptimize.domain.policy import PolicyTuning
from benchmarks.policy_frontier import Point, frontier, main, pareto
from benchmarks.policy_sim import streaming_writes

MiB = 1 << 20


def _p(live: float, wa: float) -> Point:
    return Point(PolicyTuning(8 * MiB), live, wa, 1)


def test_the_frontier_keeps_only_points_no_other_beats_on_both_figures():
    points = [_p(1.2, 1.4), _p(1.0, 1.6), _p(1.1, 1.7), _p(0.9, 1.8), _p(1.3, 1.45), _p(1.0, 1.6)]
    front = pareto(points)
    assert [(p.live_ratio, p.write_amplification) for p in front] == [(1.2, 1.4), (1.0, 1.6), (0.9, 1.8)]


def test_the_streaming_writes_follow_the_seed_and_the_commit_count():
    a, b = streaming_writes(7, 40), streaming_writes(8, 40)
    assert len(a) == len(b) == 40 and a != b
    assert streaming_writes(7, 40) == a and streaming_writes(7, 60)[:40] == a


def test_a_trace_reports_the_least_wa_and_fewest_files_from_the_tunings_it_tried():
    r = frontier(8, 8 * MiB, 1.0, commits=60)
    assert r["tunings"] > 100 and r["rewrote"] and r["bytes_written"] > 0
    front = r["pareto"]
    assert all(x["write_amplification"] <= y["write_amplification"] and x["live_ratio"] > y["live_ratio"]
               for x, y in zip(front, front[1:], strict=False))
    least, fewest = r["least_wa_at_binpack_files"], r["fewest_files_at_wa_goal"]
    if least is not None:
        assert least["live_ratio"] <= 1.0
        assert all(p["write_amplification"] >= least["write_amplification"] for p in front if p["live_ratio"] <= 1.0)
    if fewest is not None:
        assert fewest["write_amplification"] <= 1.5
    met = r["goal_met_by"]
    assert all(p["live_ratio"] <= 1.0 and p["write_amplification"] <= 1.5 for p in met)
    assert bool(met) == (least is not None and least["write_amplification"] <= 1.5)


def test_nonsense_options_are_refused(capsys):
    for argv in (["--commits", "5"], ["--latency", "-1"], ["--target", "lots"]):
        try:
            main(argv)
        except SystemExit as stop:
            assert stop.code == 2
        else:  # pragma: no cover - the assertion names the argument
            raise AssertionError(f"{argv} was accepted")
