"""Group cap and partial-progress batching (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autooptimize.domain.job_groups import cap_groups, per_commit, split_run
from autooptimize.domain.planning import PlanFile, plan_bin_pack, plan_ordered
from autooptimize.errors import InvalidArgument


def _files(sizes: list[int]) -> list[PlanFile]:
    return [PlanFile(path=f"f{i}", size=s) for i, s in enumerate(sizes)]


@given(st.lists(st.integers(1, 500), min_size=2, max_size=60), st.integers(100, 3000), st.integers(2, 4))
def test_no_group_over_the_cap_and_no_file_twice(sizes, cap, min_files):
    files = _files(sizes)
    plan = plan_bin_pack(files, target=2000, tolerance=0, min_input_files=2)
    capped = cap_groups(plan, files, cap, min_input_files=min_files)
    assert all(g.bytes_in <= cap for g in capped.groups)
    assert all(len(g.files) >= min_files for g in capped.groups if g not in plan.groups)
    paths = [f.path for g in capped.groups for f in g.files]
    assert len(paths) == len(set(paths))
    assert set(paths) <= {f.path for g in plan.groups for f in g.files}
    assert capped.files_after == len(files) - len(paths) + capped.files_out


def test_groups_within_the_cap_are_untouched():
    files = _files([100] * 10)
    plan = plan_bin_pack(files, target=1000, tolerance=0)
    assert cap_groups(plan, files, 10_000) is plan


def test_split_keeps_order_so_sorted_runs_stay_consecutive():
    files = _files([30] * 10)
    plan = plan_ordered(files, target=300, tolerance=0, max_group_bytes=300)
    capped = cap_groups(plan, files, 100)
    order = [int(f.path[1:]) for g in capped.groups for f in g.files]
    assert order == sorted(order)
    assert [len(g.files) for g in capped.groups] == [3, 3, 3]  # the tenth file alone is kept as it is


def test_a_file_alone_over_the_cap_is_never_grouped():
    assert split_run(_files([50, 500, 50]), 100) == [[_files([50])[0]], [PlanFile("f1", 500)], [PlanFile("f2", 50)]]
    files = _files([500, 40, 40])
    plan = plan_bin_pack(files, target=1000, tolerance=0)
    capped = cap_groups(plan, files, 100, min_input_files=1)
    assert all(g.bytes_in <= 100 for g in capped.groups)


@pytest.mark.parametrize(("groups", "max_commits", "expected"), [
    (1, 10, 1), (10, 10, 1), (11, 10, 2), (4, 2, 2), (5, 2, 3), (0, 3, 1), (100, 1, 100),
])
def test_per_commit_bounds_the_commits(groups, max_commits, expected):
    assert per_commit(groups, max_commits) == expected
    assert -(-groups // expected) <= max_commits


@pytest.mark.parametrize("bad", [0, -1, "x"])
def test_bad_arguments_name_themselves(bad):
    with pytest.raises(InvalidArgument, match="max_commits"):
        per_commit(3, bad)
    with pytest.raises(InvalidArgument, match="max_group_bytes"):
        split_run(_files([1]), bad)
