"""Which of a table's files a calibration of its output model rewrites (``calibration_groups`` and
``calibration_singles``), and the fit on what they measured."""

from __future__ import annotations

import pytest

from autooptimize.domain.output_model import (
    CALIBRATION_FANS,
    CALIBRATION_GROUPS,
    CALIBRATION_SINGLES,
    MIN_CALIBRATION_GROUPS,
    calibration_groups,
    calibration_singles,
    fit_output_model,
)

KB = 1024


def _files(prefix: str, sizes: list[int]) -> list[tuple[int, str]]:
    return [(s, f"{prefix}/{i:03d}.parquet") for i, s in enumerate(sizes)]


def test_groups_take_the_fans_in_turn_from_the_smallest_files_of_the_fullest_partition() -> None:
    full = _files("a", [30 * KB + i for i in range(60)])
    other = _files("b", [10 * KB] * 5)
    groups = calibration_groups([other, full], target=8 << 20, max_bytes=1 << 30)
    assert len(groups) == CALIBRATION_GROUPS and all(i == 1 for i, _ in groups)  # the fullest partition first
    # the fans in turn; the last run takes the two files left
    assert [len(paths) for _, paths in groups] == [*CALIBRATION_FANS, 2, 3, 4, 6, 8, 2]
    taken = [p for _, paths in groups for p in paths]
    assert taken == [p for _, p in sorted(full)]  # smallest first, each file once


def test_a_partition_runs_out_and_the_next_gives_the_rest() -> None:
    a = _files("a", [20 * KB] * 10)  # 2 + 3 + 4, one file left over
    b = _files("b", [25 * KB] * 40)
    groups = calibration_groups([a, b], target=8 << 20, max_bytes=1 << 30)
    assert [(i, len(p)) for i, p in groups][:3] == [(1, 2), (1, 3), (1, 4)]  # b holds more small files
    assert all(len(p) >= 2 for _, p in groups)
    assert {i for i, _ in groups} == {0, 1}
    assert sum(len(p) for i, p in groups if i == 1) <= 40


def test_a_group_stays_under_the_target_and_files_at_the_target_are_not_taken() -> None:
    target = 1 << 20
    sizes = [300 * KB] * 12 + [target] * 5
    groups = calibration_groups([_files("a", sizes)], target=target, max_bytes=1 << 30)
    sized = dict((p, s) for s, p in _files("a", sizes))
    for _, paths in groups:
        assert 2 <= len(paths) and sum(sized[p] for p in paths) < target
    assert all(sized[p] < target for _, paths in groups for p in paths)
    # no two files under the target together: nothing to calibrate on
    assert calibration_groups([_files("a", [600 * KB] * 8)], target=target, max_bytes=1 << 30) == []


def test_the_groups_read_at_most_the_byte_budget() -> None:
    files = _files("a", [1 << 20] * 200)
    groups = calibration_groups([files], target=128 << 20, max_bytes=20 << 20)
    assert sum(len(p) for _, p in groups) * (1 << 20) <= 20 << 20
    assert [len(p) for _, p in groups] == [2, 3, 4, 6]  # the next (8 files) would read 23 MiB


def test_the_same_files_give_the_same_groups() -> None:
    import random

    parts = [_files("a", [(i * 7919) % 50_000 + 1_000 for i in range(80)]), _files("b", [4_000] * 30)]
    shuffled = [random.Random(k).sample(files, len(files)) for k, files in enumerate(parts)]
    assert calibration_groups(parts, 8 << 20, 1 << 30) == calibration_groups(shuffled, 8 << 20, 1 << 30)


@pytest.mark.parametrize(("share", "overhead"), [(0.99, 8_500), (0.35, 0), (1.0, 1_200)])
def test_the_fit_on_groups_of_these_fans_tells_the_share_from_the_weight_per_file(share, overhead) -> None:
    """Files of one size in each group: only the fans differ, and that is enough to tell the two apart."""
    groups = calibration_groups([_files("a", [29 * KB] * 60)], 8 << 20, 1 << 30)
    samples = [(29 * KB * len(p), round(share * 29 * KB * len(p) - overhead * (len(p) - 1)), len(p) - 1)
               for _, p in groups]
    fit = fit_output_model(samples, MIN_CALIBRATION_GROUPS)
    if share < 0.5:  # outside what the fit believes
        assert fit is None
        return
    assert fit is not None and abs(fit[0] - share) < 1e-5 and abs(fit[1] - overhead) <= 2
    assert fit_output_model(samples[:MIN_CALIBRATION_GROUPS - 1], MIN_CALIBRATION_GROUPS) is None


def test_single_files_are_taken_across_the_sizes_under_the_target() -> None:
    a = _files("a", [10 * KB * (i + 1) for i in range(20)])  # 10 … 200 KB
    b = _files("b", [5 * KB, 300 * KB, 9 << 20])  # the last is over the target
    singles = calibration_singles([a, b], target=8 << 20, max_bytes=1 << 30)
    assert len(singles) == CALIBRATION_SINGLES
    sizes = {p: s for files in (a, b) for s, p in files}
    picked = sorted(sizes[p] for _, p in singles)
    assert picked[0] == 5 * KB and picked[-1] == 300 * KB  # the smallest and the largest under the target
    assert len(set(p for _, p in singles)) == CALIBRATION_SINGLES
    assert all(p.startswith("ab"[i]) for i, p in singles)  # each with its own partition
    two = [(0, "a/000.parquet"), (0, "a/001.parquet")]
    assert calibration_singles([_files("a", [KB, 2 * KB])], target=8 << 20, max_bytes=1 << 30) == two
    assert calibration_singles([_files("a", [9 << 20])], target=8 << 20, max_bytes=1 << 30) == []
    # within the bytes left: the largest are left out first
    # (the six: 5, 40, 80, 130, 170 and 300 KB; with the third they would read 125 KB)
    assert [p for _, p in calibration_singles([a, b], 8 << 20, max_bytes=100 * KB)] == ["b/000.parquet",
                                                                                        "a/003.parquet"]
