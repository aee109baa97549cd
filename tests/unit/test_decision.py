"""The per-partition decision: value against cost, rules before scores, a reason code every time."""

from __future__ import annotations

import pytest

from autooptimize.domain.decision import (
    DeleteFacts,
    MergeFacts,
    PartitionFacts,
    SortFacts,
    decide,
)

MB = 1024 * 1024
T = 32 * MB  # tolerance
ALL = frozenset({"merge", "sort", "compact_deletes"})


def facts(*, mse=float(100 * MB) ** 2, merge=None, deletes=None, sort=None, allowed=ALL, max_bytes=None,
          files=100, size=100 * MB):
    return PartitionFacts(files=files, bytes=size, mse=mse, tolerance=T, merge=merge,
                          deletes=deletes or DeleteFacts(), sort=sort, allowed=allowed, max_bytes=max_bytes)


SMALL_MERGE = MergeFacts(bytes_rewritten=100 * MB, files_in=100, files_out=1, mse_before=float(100 * MB) ** 2,
                         mse_after=0.0)


def test_healthy_partition_is_left_alone():
    d = decide(facts(mse=float(T - 1) ** 2, merge=None))
    assert (d.kind, d.reason) == (None, "below_threshold")


def test_small_files_get_a_merge_with_its_value_and_cost_recorded():
    d = decide(facts(merge=SMALL_MERGE))
    assert (d.kind, d.reason) == ("merge", "above_threshold")
    [merge] = d.candidates
    assert merge.cost == 100 * MB and merge.value > 99 * 4 * MB


def test_no_plan_despite_high_mse_says_nothing_to_merge():
    assert decide(facts(merge=None)).reason == "nothing_to_merge"


def test_delete_heavy_partition_is_compacted_even_with_healthy_sizes():
    heavy = DeleteFacts(files=2, bytes=MB, rows_deleted_estimate=100, data_rows=1000, data_bytes_affected=50 * MB)
    d = decide(facts(mse=0.0, deletes=heavy))
    assert (d.kind, d.reason) == ("compact_deletes", "delete_heavy")
    assert d.candidates[0].cost == 50 * MB


def test_many_delete_files_count_as_heavy_too():
    many = DeleteFacts(files=8, bytes=MB, rows_deleted_estimate=8, data_rows=1_000_000)
    assert decide(facts(mse=0.0, deletes=many)).reason == "delete_heavy"


def test_light_deletes_on_a_healthy_partition_wait():
    light = DeleteFacts(files=1, bytes=1000, rows_deleted_estimate=1, data_rows=1_000_000)
    d = decide(facts(mse=0.0, deletes=light))
    assert (d.kind, d.reason) == (None, "below_threshold")


def test_light_deletes_block_a_merge_until_folded_in():
    light = DeleteFacts(files=1, bytes=1000, rows_deleted_estimate=1, data_rows=1_000_000)
    d = decide(facts(merge=SMALL_MERGE, deletes=light))
    assert (d.kind, d.reason) == ("compact_deletes", "has_delete_files")
    assert not next(c for c in d.candidates if c.kind == "merge").eligible


def test_over_budget_compaction_is_not_taken():
    heavy = DeleteFacts(files=20, bytes=MB, rows_deleted_estimate=500, data_rows=1000, data_bytes_affected=500 * MB)
    d = decide(facts(mse=0.0, deletes=heavy, max_bytes=100 * MB))
    assert (d.kind, d.reason) == (None, "budget")


def test_a_merge_cut_short_by_the_budget_says_so():
    partial = MergeFacts(bytes_rewritten=10 * MB, files_in=10, files_out=1, mse_before=float(100 * MB) ** 2,
                         mse_after=float(90 * MB) ** 2, limited_by_budget=True)
    assert (decide(facts(merge=partial, max_bytes=10 * MB)).reason) == "budget"


def test_an_unsorted_partition_that_needs_a_rewrite_is_sorted():
    unsorted = SortFacts(overlapping_bytes=100 * MB, partition_bytes=100 * MB, files=100, bytes_rewritten=100 * MB,
                         files_in=100, files_out=1, mse_after=0.0)
    d = decide(facts(merge=SMALL_MERGE, sort=unsorted))
    assert (d.kind, d.reason) == ("sort", "unsorted")
    sort = next(c for c in d.candidates if c.kind == "sort")
    merge = next(c for c in d.candidates if c.kind == "merge")
    assert sort.value_per_byte > merge.value_per_byte


def test_merge_wins_when_sorting_would_rewrite_far_more_than_it_gains():
    # the merge touches 20 small files; a sort would rewrite the whole 10 GB partition
    cheap = MergeFacts(bytes_rewritten=20 * MB, files_in=20, files_out=1, mse_before=float(40 * MB) ** 2,
                       mse_after=float(30 * MB) ** 2)
    big = SortFacts(overlapping_bytes=6000 * MB, partition_bytes=10_000 * MB, files=100,
                    bytes_rewritten=10_000 * MB, files_in=100, files_out=80, mse_after=float(30 * MB) ** 2)
    d = decide(facts(mse=float(40 * MB) ** 2, merge=cheap, sort=big, size=10_000 * MB))
    assert d.kind == "merge"


def test_only_disallowed_candidates_leave_the_partition_alone_with_a_reason():
    heavy = DeleteFacts(files=9, bytes=MB, rows_deleted_estimate=500, data_rows=1000)
    d = decide(facts(deletes=heavy, merge=SMALL_MERGE, allowed=frozenset({"merge"})))
    assert (d.kind, d.reason) == (None, "not_allowed")


@pytest.mark.parametrize("mse", [0.0, float(T) ** 2, float(10 * T) ** 2])
def test_every_decision_names_a_known_reason(mse):
    reasons = {"delete_heavy", "has_delete_files", "unsorted", "above_threshold", "budget", "below_threshold",
               "nothing_to_merge", "not_allowed"}
    for deletes in (None, DeleteFacts(files=1, bytes=1, rows_deleted_estimate=1, data_rows=10)):
        for merge in (None, SMALL_MERGE):
            assert decide(facts(mse=mse, merge=merge, deletes=deletes)).reason in reasons
