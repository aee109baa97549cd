"""File Size Entropy: exact integers, rolling figure equals a full recomputation."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autooptimize.domain.decision import PartitionFacts
from autooptimize.domain.entropy import (
    EntropyStats,
    file_error,
    mse_needs_attention,
    needs_attention,
    squared_error,
)
from autooptimize.errors import InvalidArgument

TARGET = 128 * 1024 * 1024

sizes = st.integers(min_value=0, max_value=3 * TARGET)
targets = st.integers(min_value=1, max_value=4 * TARGET)


@pytest.mark.parametrize(
    ("size", "target", "error"),
    [(0, 100, 100), (1, 100, 99), (99, 100, 1), (100, 100, 0), (250, 100, 0), (0, 1, 1)],
)
def test_file_error_punishes_only_small_files(size: int, target: int, error: int) -> None:
    assert file_error(size, target) == error
    assert squared_error(size, target) == error * error


@pytest.mark.parametrize(("size", "target"), [(-1, 100), (10, 0), (10, -5), (1.5, 100), (10, 2.0)])
def test_bad_inputs_are_named(size: object, target: object) -> None:
    with pytest.raises(InvalidArgument, match="size|target"):
        file_error(size, target)  # type: ignore[arg-type]


def test_empty_partition() -> None:
    empty = EntropyStats.empty()
    assert (empty.n, empty.sse, empty.mse) == (0, 0, 0.0)
    assert not empty.needs_attention(0)
    assert EntropyStats.from_sizes([], TARGET) == empty


def test_mse_and_attention_threshold_are_exact() -> None:
    stats = EntropyStats.from_sizes([60, 80, 100, 140], 100)  # errors 40, 20, 0, 0
    assert stats == EntropyStats(4, 2000)
    assert stats.mse == 500.0
    # MSE ≥ T² ⇔ sse ≥ T²·n: 500 ≥ 22² = 484 but 500 < 23² = 529
    assert stats.needs_attention(22)
    assert not stats.needs_attention(23)
    assert stats.excess(22) == 2000 - 484 * 4
    # equality counts as needing attention
    assert EntropyStats(1, 25).needs_attention(5)


@pytest.mark.parametrize(("n", "sse"), [(-1, 0), (0, 5), (2, -1)])
def test_invalid_stats_refused(n: int, sse: int) -> None:
    with pytest.raises(InvalidArgument):
        EntropyStats(n, sse)


def test_apply_refuses_impossible_removals() -> None:
    stats = EntropyStats.from_sizes([10], 100)
    with pytest.raises(InvalidArgument, match="scan"):
        stats.apply([], [10, 20], 100)  # n would go negative
    with pytest.raises(InvalidArgument, match="scan"):
        stats.apply([], [0], 100)  # sse would go negative (error 100² > 90²)
    with pytest.raises(InvalidArgument, match="tolerance"):
        stats.needs_attention(-1)


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[int], list[tuple[list[int], list[int]]]]:
    """A target, an initial file list and snapshots of (added, removed) drawn from the live files."""
    target = draw(targets)
    live = draw(st.lists(st.integers(0, 3 * target), max_size=20))
    initial = list(live)
    snapshots: list[tuple[list[int], list[int]]] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["append", "delete", "overwrite", "rewrite", "expire-all"]))
        removed: list[int] = []
        if kind in ("delete", "overwrite", "rewrite") and live:
            picks = draw(st.sets(st.integers(0, len(live) - 1), max_size=len(live)))
            removed = [live[i] for i in sorted(picks)]
            live = [s for i, s in enumerate(live) if i not in picks]
        elif kind == "expire-all":
            removed, live = live, []
        added: list[int] = []
        if kind in ("append", "overwrite"):
            added = draw(st.lists(st.integers(0, 3 * target), max_size=8))
        elif kind == "rewrite" and removed:
            # a compaction writes the same bytes again in fewer files
            total = sum(removed)
            parts = draw(st.integers(1, max(1, len(removed))))
            added = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
        live = live + added
        snapshots.append((added, removed))
    return target, initial, snapshots


@settings(deadline=None, max_examples=150)
@given(histories())
def test_rolling_equals_exact(history: tuple[int, list[int], list[tuple[list[int], list[int]]]]) -> None:
    target, initial, snapshots = history
    rolling = EntropyStats.from_sizes(initial, target)
    live = list(initial)
    for added, removed in snapshots:
        rolling = rolling.apply(added, removed, target)
        for size in removed:
            live.remove(size)
        live.extend(added)
        assert rolling == EntropyStats.from_sizes(live, target)
    assert rolling.n == len(live)


@settings(deadline=None, max_examples=100)
@given(st.lists(sizes), st.lists(sizes), targets, st.integers(0, 4 * TARGET))
def test_merge_is_union_and_attention_matches_mse(
    left: list[int], right: list[int], target: int, tolerance: int
) -> None:
    merged = EntropyStats.from_sizes(left, target).merge(EntropyStats.from_sizes(right, target))
    assert merged == EntropyStats.from_sizes(left + right, target)
    if merged.n:
        # the integer test agrees with the rational MSE compared against T²
        assert merged.needs_attention(tolerance) == (merged.sse >= tolerance * tolerance * merged.n)
        assert merged.mse == pytest.approx(merged.sse / merged.n)
    else:
        assert not merged.needs_attention(tolerance)


# ------------------------------------------------------------------ one attention rule, exact


def float_attention_rule(sse: int, n: int, tolerance: int) -> bool:
    """The float form ``MSE ≥ float(T) ** 2`` that decision.py used before the rule was unified."""
    return n > 0 and sse / n >= float(tolerance) ** 2


#: ``T = 2²⁷ + 1``: ``T² = 2⁵⁴ + 2²⁸ + 1`` has no float, ``float(T) ** 2`` rounds down to ``2⁵⁴ + 2²⁸``
#: which is ``sse`` itself, so the float form called a partition just under T² "needs attention".
DISAGREEING_T = 2**27 + 1
DISAGREEING = [(DISAGREEING_T**2 - 1, 1, DISAGREEING_T), (3 * (DISAGREEING_T**2 - 1), 3, DISAGREEING_T)]


@pytest.mark.parametrize(("sse", "n", "tolerance"), DISAGREEING)
def test_the_float_form_disagreed_and_the_one_rule_decides_exactly(sse: int, n: int, tolerance: int) -> None:
    assert float_attention_rule(sse, n, tolerance)  # the old float form says yes …
    assert sse < tolerance * tolerance * n  # … but MSE is under T², exactly
    assert not needs_attention(sse, n, tolerance)
    assert not EntropyStats(n, sse).needs_attention(tolerance)
    assert not PartitionFacts(files=n, bytes=0, mse=sse / n, tolerance=tolerance, merge=None, sse=sse).needs_attention
    # a caller holding only the float MSE is judged on that float exactly, not on float(T) ** 2
    assert not mse_needs_attention(sse / n, n, tolerance)
    assert not PartitionFacts(files=n, bytes=0, mse=sse / n, tolerance=tolerance, merge=None).needs_attention


@settings(deadline=None, max_examples=300)
@given(
    st.integers(0, 2**70),
    st.integers(0, 10_000),
    st.one_of(st.integers(0, 2**34), st.sampled_from([DISAGREEING_T, 2**27, 2**26 + 3])),
)
def test_every_form_of_the_attention_rule_agrees(sse: int, n: int, tolerance: int) -> None:
    if n == 0:
        sse = 0
    exact = n > 0 and sse >= tolerance * tolerance * n
    assert needs_attention(sse, n, tolerance) == exact
    assert EntropyStats(n, sse).needs_attention(tolerance) == exact
    mse = EntropyStats(n, sse).mse
    assert PartitionFacts(files=n, bytes=0, mse=mse, tolerance=tolerance, merge=None, sse=sse).needs_attention == exact
    # the float-MSE form is exact about the float it is given
    assert mse_needs_attention(mse, n, tolerance) == (n > 0 and Fraction(mse) >= tolerance * tolerance)


def test_the_float_mse_form_refuses_nan() -> None:
    with pytest.raises(InvalidArgument):
        mse_needs_attention(float("nan"), 1, 1)
