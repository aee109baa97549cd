"""benchmarks.streaming refuses a run the disk cannot hold, before it creates anything."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.streaming import DISK_PER_BYTE_WRITTEN, check_disk, disk_needed


def test_a_run_needs_two_tables_with_the_baseline_and_one_without_or_with_free_disk():
    one = int(DISK_PER_BYTE_WRITTEN * 1e9 * 1.1)
    assert disk_needed(1e9, baseline=False, free_disk=False) == one
    assert disk_needed(1e9, baseline=True, free_disk=True) == one
    assert disk_needed(1e9, baseline=True, free_disk=False) == 2 * one


def test_a_run_larger_than_the_free_disk_is_refused_with_what_it_needs(tmp_path):
    args = argparse.Namespace(no_baseline=True, free_disk=False)
    check_disk(1_000_000, args, str(tmp_path))  # a MB fits
    with pytest.raises(SystemExit, match=r"needs about [\d.]+ GB free under .* GB are: .*--free-disk"):
        check_disk(2 * 10**18, args, str(tmp_path))
    assert list(tmp_path.iterdir()) == []
