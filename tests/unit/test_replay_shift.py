"""benchmarks.replay_shift: histories of the DoD 2 shape, replayed as predicted and with shifted write times."""

from __future__ import annotations

from benchmarks.replay_shift import COMMITS, PACE, history, main, shifted


def test_a_history_has_the_tests_shape_and_its_own_times():
    a, b = history(0), history(1)
    assert len(a) == len(b) == COMMITS
    assert [w.files for w in a] == [w.files for w in b]  # the same rows
    assert [w.at for w in a] != [w.at for w in b]
    assert all(later.at - earlier.at >= 0.12 - 1e-9 for earlier, later in zip(a, a[1:], strict=False))
    assert all(w.at >= i * PACE for i, w in enumerate(a))
    late = [w for w in a if len(w.files) == 2]
    assert late and all(w.files[0][0].ordinal == w.files[1][0].ordinal - 1 for w in late)


def test_shifted_keeps_the_files_in_order_and_moves_the_times_within_the_shift():
    writes = history(3)
    moved = shifted(writes, 7, 0.2)
    assert [w.files for w in moved] == [w.files for w in writes]
    assert [w.at for w in moved] == sorted(w.at for w in moved)
    assert max(abs(m.at - w.at) for m, w in zip(moved, writes, strict=True)) <= 0.2 + 1e-9  # sorting keeps that
    assert moved != writes


def test_the_benchmark_prints_the_baseline_and_the_ratio(capsys):
    assert main(["--histories", "2", "--copies", "1", "--shift", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "2 histories, one replay each (baseline): WA mean 2." in out
    assert "shifted ±0.1 s" in out and "sd / baseline's" in out
