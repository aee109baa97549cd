"""File-size histograms: every file in exactly one bucket, the right one, on edges shared by every series."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.histogram import (
    MAX_BUCKETS,
    bucket_labels,
    format_bytes,
    histograms,
    power_of_two_edges,
    size_histogram,
)
from autooptimize.errors import InvalidArgument

sizes = st.lists(st.integers(min_value=0, max_value=2**40), max_size=200)


@given(sizes, st.one_of(st.none(), st.integers(min_value=1, max_value=2**40)))
def test_every_file_lands_once_in_its_bucket(files, target):
    edges = power_of_two_edges(files, target)
    hist = size_histogram(files, edges)
    assert hist.files == len(files) and sum(hist.bytes) == sum(files)
    assert edges[0] == 0 and list(edges) == sorted(set(edges)) and len(edges) <= MAX_BUCKETS
    for size in files:
        i = max(j for j, e in enumerate(edges) if e <= size)
        assert edges[i] <= size and (i + 1 == len(edges) or size < edges[i + 1])
    largest = max([*files, target or 0, 1024])
    assert edges[-1] <= largest < 2 * edges[-1] or edges[-1] == 0  # the last edge is the top power of two


def test_before_and_after_share_edges_that_reach_the_target():
    mib = 1024 * 1024
    result = histograms({"before": [3000] * 12, "after": [9000]}, target=mib)
    assert result["before"].edges == result["after"].edges
    assert result["before"].edges[-1] == mib  # the last (open) bucket starts at the target here
    assert result["before"].counts[1] == 12 and result["after"].files == 1


def test_labels_read_as_sizes():
    assert bucket_labels((0, 1024, 2048)) == ["< 1 KiB", "1 KiB–2 KiB", "≥ 2 KiB"]
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(512) == "512 B" and format_bytes(3 * 2**30) == "3 GiB"


@pytest.mark.parametrize("bad", [[-1], [1.5], [True]])
def test_a_bad_size_is_named(bad):
    with pytest.raises(InvalidArgument, match="file size"):
        size_histogram(bad, (0, 1024))


def test_bad_edges_are_refused():
    with pytest.raises(InvalidArgument, match="edges"):
        size_histogram([1], (1024, 2048))
