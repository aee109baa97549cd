"""benchmarks.streaming_repeat: the mean and range of several service runs beside one bin-pack run."""

from __future__ import annotations

import pytest

from benchmarks.streaming_repeat import did_work, main, summarise


def run(files: float, wa: float, aborted: int = 0, equal: bool = True) -> dict[str, object]:
    return {"live_files_mean": files, "write_amplification": wa, "aborted_or_failed": aborted,
            "content_equal": equal, "rows_expected": 10, "bytes_rewritten": 5}


BASELINE = {"live_files_mean": 27.67, "write_amplification": 1.657, "content_equal": True}


def test_goals_are_judged_on_the_mean_and_each_run_is_counted():
    summary = summarise([run(27.53, 1.491), run(27.22, 1.486), run(27.84, 1.459)], BASELINE)
    assert summary["mean"] == {"files_ratio": round((0.995 + 0.984 + 1.006) / 3, 4), "write_amplification": 1.4787}
    assert summary["range"] == {"files_ratio": [0.984, 1.006], "write_amplification": [1.459, 1.491]}
    assert summary["goals_on_mean"] == {"mean live files ≤ baseline": True, "write amplification ≤ 1.5": True,
                                        "zero aborted actions": True, "content equal": True}
    assert summary["runs_meeting"] == {"mean live files ≤ baseline": 2, "write amplification ≤ 1.5": 3, "both": 2}


def test_a_mean_over_the_goal_misses_it_though_one_run_met_it():
    summary = summarise([run(26.98, 1.565), run(28.08, 1.599), run(28.05, 1.617, aborted=1)], BASELINE)
    assert summary["goals_on_mean"]["mean live files ≤ baseline"] is False  # 0.975, 1.015, 1.014
    assert summary["goals_on_mean"]["write amplification ≤ 1.5"] is False
    assert summary["goals_on_mean"]["zero aborted actions"] is False
    assert summary["runs_meeting"] == {"mean live files ≤ baseline": 1, "write amplification ≤ 1.5": 0, "both": 0}


def test_content_that_differs_anywhere_fails_the_content_goal():
    assert summarise([run(27.0, 1.4), run(27.0, 1.4, equal=False)], BASELINE)["goals_on_mean"]["content equal"] is False
    assert summarise([run(27.0, 1.4)], {**BASELINE, "content_equal": False})["goals_on_mean"]["content equal"] is False


def test_a_run_that_ingested_or_rewrote_nothing_did_no_work():
    assert did_work(run(27.0, 1.4))
    assert not did_work({**run(27.0, 1.4), "bytes_rewritten": 0})
    assert not did_work({**run(27.0, 1.4), "rows_expected": 0})


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--runs", "2", "--no-baseline"]])
def test_nonsense_runs_are_refused_before_anything_starts(argv, capsys):
    assert main(argv) == 2
    assert "--runs must be ≥ 1" in capsys.readouterr().err
