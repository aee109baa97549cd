"""Sorting a group on the pyarrow path (autooptimize/arrow/sort.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autooptimize.arrow.sort import PER_KEY_NULLS, sortable, sorted_slices


def test_slices_are_sorted_and_hold_disjoint_ranges_of_the_first_key() -> None:
    keys = [(i * 7919) % 50 if i % 9 else None for i in range(1000)]
    data = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(range(1000))})
    slices = sorted_slices(data, [("k", False, True), ("v", True, True)], 4)
    assert sum(s.num_rows for s in slices) == 1000 and 2 <= len(slices) <= 4
    ranges = []
    for s in slices:
        rows = list(zip(s.column("k").to_pylist(), s.column("v").to_pylist(), strict=True))
        # nulls first, then k ascending, v descending within a k
        assert rows == sorted(rows, key=lambda r: (r[0] is not None, r[0] if r[0] is not None else 0, -r[1]))
        ranges.append(set(s.column("k").to_pylist()))
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert not (a & b), "a value of the first key straddles two files"


def test_one_value_everywhere_is_one_file_and_descending_nulls_last_works() -> None:
    same = pa.table({"k": ["x"] * 100})
    assert len(sorted_slices(same, [("k", False, True)], 5)) == 1
    data = pa.table({"k": pa.array([3, None, 1, 2, None], pa.int64())})
    (out,) = sorted_slices(data, [("k", True, False)], 1)
    assert out.column("k").to_pylist() == [3, 2, 1, None, None]


@pytest.mark.parametrize(("keys", "expected"), [
    ([("a", False, True), ("b", True, True)], True),
    ([("a", False, True), ("b", False, False)], PER_KEY_NULLS),  # per key from pyarrow 25
    ([("s.x", False, True)], False),  # nested fields stay on Spark
    ([], False),
])
def test_sortable(keys, expected) -> None:  # type: ignore[no-untyped-def]
    assert sortable(["a", "b", "s"], keys) is expected


@pytest.mark.skipif(not PER_KEY_NULLS, reason="per-key null placement needs pyarrow 25")
def test_each_key_keeps_its_own_null_placement() -> None:
    data = pa.table({"a": pa.array([1, 1, None, 2], pa.int64()), "b": pa.array([None, 5, 1, 3], pa.int64())})
    (out,) = sorted_slices(data, [("a", False, False), ("b", True, True)], 1)
    assert list(zip(out.column("a").to_pylist(), out.column("b").to_pylist(), strict=True)) == [
        (1, None), (1, 5), (2, 3), (None, 1)]
