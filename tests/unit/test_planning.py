"""The two planners (and the Iceberg baseline): invariants, optimality against brute force, reporting."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import (
    BIN_SLACK_DIVISOR,
    Plan,
    PlanFile,
    RewriteGroup,
    Segmentation,
    expected_outputs,
    one_output_limit,
    optimal_segmentation,
    ordered_objective,
    output_sizes,
    plan_bin_pack,
    plan_iceberg_bin_pack,
    plan_ordered,
)
from autooptimize.errors import InvalidArgument

S = 1000  # target size in the small brute-force worlds
CAPACITY = S + S // BIN_SLACK_DIVISOR

#: FFD's bytes rewritten to bring MSE under T² are within this factor of the brute-force minimum.
#: Measured: 1.00 worst over the seeded corpus below (1,000 partitions, 514 feasible); 1.32 worst (mean
#: 1.00003) over 10,794 feasible random partitions of up to 10 files. Empirical: FFD is a heuristic.
FFD_BYTES_FACTOR = 1.5
#: Share of brute-force-feasible partitions where FFD also brings MSE under T². Measured: 100 % of the
#: corpus, 99.98 % of the 10,794 (the two misses need a packing cleverer than FFD; bin packing is NP-hard).
FFD_REACH_RATE = 0.98

FAST = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def files_of(sizes: Sequence[int]) -> list[PlanFile]:
    return [
        PlanFile(f"s3://bucket/t/data/f{i:03d}.parquet", s, record_count=s // 10) for i, s in enumerate(sizes)
    ]


def excess_after(plan: Plan, files: Sequence[PlanFile]) -> int:
    """Exact excess SSE − T²·N after the plan, recomputed from scratch from the plan's own groups."""
    grouped = {f.path for g in plan.groups for f in g.files}
    sizes = [f.size for f in files if f.path not in grouped]
    sizes += [size for g in plan.groups for size in g.output_sizes()]
    return EntropyStats.from_sizes(sizes, plan.target).excess(plan.tolerance)


def assert_well_formed(plan: Plan, files: Sequence[PlanFile], min_input_files: int) -> None:
    """No file lost or duplicated, no tiny group, figures consistent with the groups."""
    paths = [f.path for g in plan.groups for f in g.files]
    assert len(paths) == len(set(paths)), "a file is in two groups"
    assert set(paths) <= {f.path for f in files}, "a group holds a file that is not an input"
    for g in plan.groups:
        assert len(g.files) >= min_input_files
        assert len(g.files) >= 2, "a group of one file would rewrite a file into itself"
        assert g.files_out == expected_outputs(g.bytes_in, plan.target)
        assert sum(g.output_sizes()) == g.bytes_in
        assert max(g.output_sizes()) - min(g.output_sizes()) <= 1
    assert plan.files_in == len(paths)
    assert plan.files_out == sum(g.files_out for g in plan.groups)
    assert plan.bytes_rewritten == sum(f.size for g in plan.groups for f in g.files)
    assert plan.files_before == len(files)
    assert plan.files_after == len(files) - plan.files_in + plan.files_out
    assert plan.is_empty == (not plan.groups)
    before = EntropyStats.from_sizes([f.size for f in files], plan.target)
    after = before.apply(
        [s for g in plan.groups for s in g.output_sizes()],
        [f.size for g in plan.groups for f in g.files],
        plan.target,
    )
    assert plan.mse_before == before.mse
    assert plan.mse_after == after.mse
    assert after.n == plan.files_after


# ------------------------------------------------------------------------------------ brute force


def brute_min_bytes(
    sizes: Sequence[int], target: int, tolerance: int, min_input: int, cap: int
) -> int | None:
    """Fewest bytes any set of disjoint groups of files under the target (each ≥ ``min_input`` files and
    ≤ ``cap`` bytes) must rewrite to bring the excess below zero; None when no grouping does.

    Subset DP, O(3^n): ``best[U]`` is the largest excess reduction from partitioning ``U`` into groups.
    """
    t2 = tolerance * tolerance
    excess = EntropyStats.from_sizes(sizes, target).excess(tolerance)
    if excess < 0:
        return 0
    idx = [i for i, s in enumerate(sizes) if s < target]
    n = len(idx)
    full = 1 << n
    total = [0] * full
    e_in = [0] * full
    count = [0] * full
    for mask in range(1, full):
        low = (mask & -mask).bit_length() - 1
        rest = mask & (mask - 1)
        s = sizes[idx[low]]
        total[mask] = total[rest] + s
        e_in[mask] = e_in[rest] + (target - s) ** 2
        count[mask] = count[rest] + 1
    red: list[int | None] = [None] * full
    for mask in range(1, full):
        if count[mask] >= min_input and total[mask] <= cap:
            outs = output_sizes(total[mask], target)
            e_out = sum((target - o) ** 2 for o in outs if o < target)
            red[mask] = e_in[mask] - e_out - t2 * (count[mask] - len(outs))
    best: list[int | None] = [None] * full
    best[0] = 0
    for mask in range(1, full):
        low = mask & -mask
        rest = mask ^ low
        top: int | None = None
        sub = rest
        while True:
            group = sub | low
            r, b = red[group], best[mask ^ group]
            if r is not None and b is not None and (top is None or r + b > top):
                top = r + b
            if sub == 0:
                break
            sub = (sub - 1) & rest
        best[mask] = top
    feasible = [total[m] for m in range(1, full) if (b := best[m]) is not None and b > excess]
    return min(feasible) if feasible else None


def segmentations(n: int) -> Iterator[Segmentation]:
    """All 2^(n−1) ways to cut ``0..n`` into consecutive non-empty spans."""
    if n == 0:
        yield ()
        return
    for cuts in itertools.product((False, True), repeat=n - 1):
        spans: list[tuple[int, int]] = []
        start = 0
        for i, cut in enumerate(cuts, 1):
            if cut:
                spans.append((start, i))
                start = i
        spans.append((start, n))
        yield tuple(spans)


def brute_objective(files: Sequence[PlanFile], tolerance: int, **kw: int | None) -> int:
    """Least :func:`ordered_objective` over every valid segmentation (keeping everything is valid)."""
    best: int | None = None
    for seg in segmentations(len(files)):
        try:
            cost = ordered_objective(files, seg, S, tolerance, **kw)  # type: ignore[arg-type]
        except InvalidArgument:
            continue
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


def reference_knuth_plass(
    sizes: Sequence[int], target: int, t2: int, min_input: int, lam: int, cap: int
) -> int:
    """The plain O(n·w) dynamic programme, cost only: the fast one must agree with it."""
    n = len(sizes)
    best = [0] * (n + 1)
    for i in range(1, n + 1):
        e = max(0, target - sizes[i - 1])
        cost = best[i - 1] + e * e - t2
        for j in range(i - min_input, -1, -1):
            g = sum(sizes[j:i])
            if g > cap:
                break
            outs = output_sizes(g, target)
            c = best[j] + sum(max(0, target - o) ** 2 - t2 for o in outs) + lam * g
            cost = min(cost, c)
        best[i] = cost
    return best[n]


def small_sizes(max_files: int) -> st.SearchStrategy[list[int]]:
    """Partitions of a streaming table in miniature: many tiny files, some mid-sized, a few healthy."""
    size = st.one_of(
        st.integers(1, S // 10),
        st.integers(1, S - 1),
        st.integers(S // 2, 2 * S),
        st.sampled_from([0, 250, 500, 750, S - 1, S, S + 1, 1500]),  # sums land on the model's edges
    )
    return st.lists(size, min_size=0, max_size=max_files)


def tolerance_for(sizes: Sequence[int], fraction: float) -> int:
    """A tolerance somewhere below the partition's current RMS error, so there is work to do."""
    stats = EntropyStats.from_sizes(sizes, S)
    rms = int((stats.sse // stats.n) ** 0.5) if stats.n else 0
    return int(rms * fraction)


# -------------------------------------------------------------------------------------- examples


def test_streaming_partition_merges_the_small_files_only() -> None:
    files = files_of([100] * 10 + [1000, 1200])
    plan = plan_bin_pack(files, S, 100)
    assert_well_formed(plan, files, 2)
    assert [len(g.files) for g in plan.groups] == [10]
    assert plan.groups[0].files_out == 1
    assert plan.files_after == 3
    assert plan.mse_after == 0.0 and plan.bytes_rewritten == 1000


def test_already_healthy_partition_gets_an_empty_plan() -> None:
    files = files_of([990, 1000, 1500, 10])  # errors 10, 0, 0, 990 → MSE ≈ 245k
    for planner in (plan_bin_pack, plan_ordered):
        assert planner(files, S, 500).is_empty  # 245k < 500²
    # the threshold is exact: MSE ≥ T² needs attention, a tolerance one byte larger does not
    stats = EntropyStats.from_sizes([f.size for f in files], S)
    tolerance = int(stats.mse**0.5)
    assert stats.needs_attention(tolerance) and not stats.needs_attention(tolerance + 1)
    assert plan_bin_pack(files, S, tolerance + 1).is_empty
    assert plan_ordered(files, S, tolerance + 1).is_empty


def test_a_plan_says_whether_the_partition_still_needs_attention_after_it() -> None:
    files = files_of([100] * 10 + [1000, 1000])
    for planner in (plan_bin_pack, plan_ordered):
        plan = planner(files, S, 100)
        after = EntropyStats.from_sizes(
            [f.size for f in files if all(f not in g.files for g in plan.groups)]
            + [s for g in plan.groups for s in g.output_sizes()],
            S,
        )
        assert plan.needs_attention_after == after.needs_attention(100)
        assert not plan.needs_attention_after
    assert plan_bin_pack(files, S, 100, max_bytes=0).needs_attention_after


def test_essential_not_complete() -> None:
    # nine tiny files and one mid-sized: merging the tiny ones is enough, the 400 stays
    files = files_of([10] * 9 + [400] + [1000] * 10)
    plan = plan_bin_pack(files, S, 350)
    assert_well_formed(plan, files, 2)
    assert plan.mse_after < 350**2
    assert all(f.size == 10 for g in plan.groups for f in g.files)


def test_no_candidates_means_no_plan() -> None:
    files = files_of([1000, 1500, 2500])
    assert plan_bin_pack(files, S, 0).is_empty
    assert plan_ordered(files, S, 0).is_empty
    assert plan_bin_pack([], S, 10).is_empty and plan_ordered([], S, 10).is_empty


def test_ordered_keeps_runs_consecutive_and_sort_keys() -> None:
    sizes = [300, 300, 400, 1000, 50, 50, 900, 100]
    files = [PlanFile(f"f{i}", s, sort_key=(i,)) for i, s in enumerate(sizes)]
    plan = plan_ordered(files, S, 100)
    assert_well_formed(plan, files, 2)
    for g in plan.groups:
        positions = [files.index(f) for f in g.files]
        assert positions == list(range(positions[0], positions[0] + len(positions)))
        assert [f.sort_key for f in g.files] == [(p,) for p in positions]


def test_max_bytes_caps_the_rewrite() -> None:
    files = files_of([100] * 30)
    plan = plan_bin_pack(files, S, 0, max_bytes=2500)
    assert_well_formed(plan, files, 2)
    assert 0 < plan.bytes_rewritten <= 2500
    ordered = plan_ordered(files, S, 0, max_bytes=2500)
    assert 0 < ordered.bytes_rewritten <= 2500
    assert plan_bin_pack(files, S, 0, max_bytes=0).is_empty


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"target": 0}, "target"),
        ({"tolerance": -1}, "tolerance"),
        ({"min_input_files": 1}, "min_input_files"),
        ({"max_bytes": -5}, "max_bytes"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, int], name: str) -> None:
    args: dict[str, int] = {"target": S, "tolerance": 10} | kwargs
    for planner in (plan_bin_pack, plan_ordered):
        with pytest.raises(InvalidArgument, match=name):
            planner(files_of([1, 2, 3]), **args)  # type: ignore[arg-type]


def test_bad_files_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="distinct paths"):
        plan_bin_pack([PlanFile("a", 1), PlanFile("a", 2)], S, 10)
    with pytest.raises(InvalidArgument, match="size"):
        PlanFile("a", -1)
    with pytest.raises(InvalidArgument, match="files_out"):
        RewriteGroup((PlanFile("a", 1),), 0)
    with pytest.raises(InvalidArgument, match="segmentation"):
        ordered_objective(files_of([1, 2]), ((0, 1),), S, 0)
    with pytest.raises(InvalidArgument, match="needs ≥ 3"):
        ordered_objective(files_of([1, 2]), ((0, 2),), S, 0, min_input_files=3)


def test_output_model() -> None:
    assert [expected_outputs(b, S) for b in (0, 1, 499, 500, 1000, 1499, 1500, 2499, 2500)] == [
        1,
        1,
        1,
        1,
        1,
        1,
        2,
        2,
        3,
    ]
    assert output_sizes(2501, S) == (834, 834, 833)
    assert one_output_limit(S) == 1499


# ------------------------------------------------------------------------------------ invariants


@FAST
@given(small_sizes(40), st.floats(0, 1.2), st.integers(2, 5), st.none() | st.integers(0, 20 * S))
def test_bin_pack_never_loses_a_file(
    sizes: list[int], fraction: float, min_input: int, max_bytes: int | None
) -> None:
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    plan = plan_bin_pack(files, S, tolerance, min_input_files=min_input, max_bytes=max_bytes)
    assert_well_formed(plan, files, min_input)
    assert all(f.size < S for g in plan.groups for f in g.files), "only files under the target are candidates"
    assert all(g.bytes_in <= CAPACITY for g in plan.groups)
    if max_bytes is not None:
        assert plan.bytes_rewritten <= max_bytes
    if not EntropyStats.from_sizes(sizes, S).needs_attention(tolerance):
        assert plan.is_empty


@FAST
@given(small_sizes(40), st.floats(0, 1.2), st.integers(2, 5), st.none() | st.integers(0, 20 * S))
def test_ordered_never_loses_a_file(
    sizes: list[int], fraction: float, min_input: int, max_bytes: int | None
) -> None:
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    plan = plan_ordered(files, S, tolerance, min_input_files=min_input, max_bytes=max_bytes)
    assert_well_formed(plan, files, min_input)
    position = {f.path: i for i, f in enumerate(files)}
    for g in plan.groups:
        at = [position[f.path] for f in g.files]
        assert at == list(range(at[0], at[0] + len(at))), "an ordered group must be a consecutive run"
        assert g.bytes_in <= one_output_limit(S)
    if max_bytes is not None:
        assert plan.bytes_rewritten <= max_bytes
    if not EntropyStats.from_sizes(sizes, S).needs_attention(tolerance):
        assert plan.is_empty


@FAST
@given(small_sizes(40), st.floats(0, 1.2))
def test_essential_stop_does_not_overshoot(sizes: list[int], fraction: float) -> None:
    """When a plan reaches the goal, it did not before its last group: no whole group is spare."""
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    for planner in (plan_bin_pack, plan_ordered):
        plan = planner(files, S, tolerance)
        if plan.groups and plan.mse_after < tolerance**2:
            shorter = Plan(S, tolerance, plan.groups[:-1], 0.0, 0.0, 0, 0)
            assert excess_after(shorter, files) >= 0


@FAST
@given(small_sizes(40))
def test_iceberg_baseline_never_loses_a_file(sizes: list[int]) -> None:
    files = files_of(sizes)
    plan = plan_iceberg_bin_pack(files, S)
    paths = [f.path for g in plan.groups for f in g.files]
    assert len(paths) == len(set(paths))
    for g in plan.groups:
        assert all(f.size < 750 or f.size > 1800 for f in g.files)
        assert len(g.files) >= 5 or g.bytes_in > S
    assert plan.files_after == len(files) - plan.files_in + plan.files_out


# ---------------------------------------------------------------------------- Knuth–Plass optimum


@settings(deadline=None, max_examples=150)
@given(
    small_sizes(12),
    st.floats(0, 1.2),
    st.integers(2, 4),
    st.sampled_from([None, 0, 1, S // 8, S]),
    st.sampled_from([None, S // 2, S, 2 * S, 3 * S]),
)
def test_knuth_plass_equals_brute_force(
    sizes: list[int], fraction: float, min_input: int, lam: int | None, cap: int | None
) -> None:
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    kw: dict[str, int | None] = {
        "min_input_files": min_input,
        "rewrite_cost_per_byte": lam,
        "max_group_bytes": cap,
    }
    seg = optimal_segmentation(files, S, tolerance, **kw)  # type: ignore[arg-type]
    assert ordered_objective(files, seg, S, tolerance, **kw) == brute_objective(files, tolerance, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_knuth_plass_equals_brute_force_on_twelve_files(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [
        rng.choice([rng.randint(1, S // 10), rng.randint(1, S - 1), rng.randint(S // 2, 2 * S)])
        for _ in range(12)
    ]
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, rng.random())
    for lam in (None, 0):
        kw: dict[str, int | None] = {"min_input_files": 2 + seed % 2, "rewrite_cost_per_byte": lam}
        seg = optimal_segmentation(files, S, tolerance, **kw)  # type: ignore[arg-type]
        cost = ordered_objective(files, seg, S, tolerance, **kw)  # type: ignore[arg-type]
        assert cost == brute_objective(files, tolerance, **kw)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(
        st.one_of(st.integers(0, S // 20), st.integers(0, 3 * S), st.sampled_from([250, 500, 750])),
        max_size=80,
    ),
    st.integers(0, S),
    st.integers(2, 5),
    st.sampled_from([0, 1, S // 4, 2 * S]),
    st.sampled_from([S // 3, one_output_limit(S), 2 * S, 5 * S]),
)
# groups of exactly 1.5 and 2.5 targets sit on the edge between one, two and three outputs
@example([750, 750], 0, 2, 1, 2 * S)
@example([500, 500, 500, 500, 500], 100, 2, 1, 5 * S)
@example([S, S // 2, S, 1], 0, 2, 1, 2 * S)
def test_fast_knuth_plass_matches_plain_programme(
    sizes: list[int], tolerance: int, min_input: int, lam: int, cap: int
) -> None:
    files = files_of(sizes)
    kw = {"min_input_files": min_input, "rewrite_cost_per_byte": lam, "max_group_bytes": cap}
    seg = optimal_segmentation(files, S, tolerance, **kw)
    expected = reference_knuth_plass(sizes, S, tolerance * tolerance, min_input, lam, cap)
    assert ordered_objective(files, seg, S, tolerance, **kw) == expected


@settings(deadline=None, max_examples=60)
@given(small_sizes(11), st.floats(0, 1.2), st.integers(2, 3))
def test_ordered_reaches_the_goal_whenever_a_segmentation_does(
    sizes: list[int], fraction: float, min_input: int
) -> None:
    """With no rewrite charge the objective is the excess itself, so its optimum decides feasibility."""
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    feasible = brute_objective(files, tolerance, min_input_files=min_input, rewrite_cost_per_byte=0) < 0
    plan = plan_ordered(files, S, tolerance, min_input_files=min_input)
    if feasible:
        assert excess_after(plan, files) < 0


# ------------------------------------------------------------------------ FFD against brute force


def next_fit_reaches(sizes: Sequence[int], tolerance: int, min_input: int) -> bool:
    """Whether cutting the size-sorted candidates into runs of at most the bin capacity, and rewriting
    every run of enough files, brings the excess below zero."""
    runs: list[list[int]] = [[]]
    for s in sorted(s for s in sizes if s < S):
        if runs[-1] and sum(runs[-1]) + s > CAPACITY:
            runs.append([])
        runs[-1].append(s)
    groups = [r for r in runs if len(r) >= min_input]
    kept = [s for s in sizes if s >= S] + [s for r in runs if len(r) < min_input for s in r]
    outs = [o for g in groups for o in output_sizes(sum(g), S)]
    # a run that does not lower the excess is left out, as the planner would
    stats = EntropyStats.from_sizes(kept + outs, S)
    best = stats.excess(tolerance)
    for g in groups:
        alone = EntropyStats.from_sizes(list(g), S).excess(tolerance)
        merged = EntropyStats.from_sizes(list(output_sizes(sum(g), S)), S).excess(tolerance)
        if merged > alone:
            best += alone - merged
    return best < 0


@FAST
@given(small_sizes(40), st.floats(0, 1.2), st.integers(2, 4))
def test_bin_pack_reaches_the_goal_whenever_next_fit_runs_do(
    sizes: list[int], fraction: float, min_input: int
) -> None:
    files = files_of(sizes)
    tolerance = tolerance_for(sizes, fraction)
    plan = plan_bin_pack(files, S, tolerance, min_input_files=min_input)
    if next_fit_reaches(sizes, tolerance, min_input):
        assert excess_after(plan, files) < 0


def corpus(count: int, seed: int = 20240611) -> Iterator[tuple[list[int], int, int]]:
    """Seeded small partitions (≤ 9 files) with a tolerance below their RMS error."""
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(2, 9)
        sizes = []
        for _ in range(n):
            r = rng.random()
            sizes.append(
                rng.randint(1, S // 10)
                if r < 0.4
                else rng.randint(1, S - 1)
                if r < 0.8
                else rng.randint(S // 2, S - 1)
            )
        yield sizes, tolerance_for(sizes, rng.random()), rng.choice([2, 2, 3, 5])


def test_bin_pack_bytes_within_factor_of_brute_force() -> None:
    feasible = reached = 0
    worst = 1.0
    for sizes, tolerance, min_input in corpus(1000):
        optimum = brute_min_bytes(sizes, S, tolerance, min_input, CAPACITY)
        files = files_of(sizes)
        plan = plan_bin_pack(files, S, tolerance, min_input_files=min_input)
        assert_well_formed(plan, files, min_input)
        if optimum is None or optimum == 0:
            continue  # nothing to do, or no grouping can do it: any plan that keeps every file is fine
        feasible += 1
        if excess_after(plan, files) < 0:
            reached += 1
            worst = max(worst, plan.bytes_rewritten / optimum)
            assert plan.bytes_rewritten <= FFD_BYTES_FACTOR * optimum, (sizes, tolerance, min_input, optimum)
    assert feasible >= 400
    assert reached / feasible >= FFD_REACH_RATE, f"reached {reached}/{feasible}"
    assert worst <= FFD_BYTES_FACTOR


# ------------------------------------------------------------------------------ output sizing


def test_out_size_plans_by_what_the_rows_weigh_once_rewritten():
    from autooptimize.domain.planning import PlanFile as PF
    from autooptimize.domain.planning import plan_bin_pack as pack

    # 60 files of 100 bytes that merge to 30 bytes each: raw bytes would plan 6000/1000 = 6 outputs,
    # the rewritten size says 1800/1000 ≈ 2
    files = [PF(f"f{i}", 100, 10, out_size=30) for i in range(60)]
    plan = pack(files, 1000, 100)
    assert plan.files_in == 60
    assert plan.files_out == 2
    assert plan.bytes_rewritten == 6000  # cost still counts bytes read
    assert sum(g.bytes_out for g in plan.groups) == 1800


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(min_value=1, max_value=400), min_size=2, max_size=80),
    st.integers(min_value=30, max_value=100),
)
def test_balance_outputs_keeps_every_file_and_never_widens_the_deviation(sizes, ratio_pct):
    from autooptimize.domain.planning import PlanFile as PF
    from autooptimize.domain.planning import balance_outputs
    from autooptimize.domain.planning import plan_bin_pack as pack

    target = 1000
    files = [PF(f"f{i}", s, 1, out_size=max(1, s * ratio_pct // 100)) for i, s in enumerate(sizes)]
    plan = pack(files, target, target // 4)
    balanced = balance_outputs(plan, files)
    before = [f.path for g in plan.groups for f in g.files]
    after = [f.path for g in balanced.groups for f in g.files]
    assert len(after) == len(set(after))  # no file in two groups
    assert set(before) <= set(after) <= {f.path for f in files}
    assert all(len(g.files) >= 2 for g in balanced.groups)

    def deviation(p):
        return max((abs(s - target) for g in p.groups for s in g.output_sizes()), default=0)

    assert deviation(balanced) <= deviation(plan)
    expected = EntropyStats.from_sizes(
        [f.size for f in files if f.path not in set(after)] + [s for g in balanced.groups for s in g.output_sizes()],
        target,
    )
    assert balanced.mse_after == pytest.approx(expected.mse)


def test_balance_outputs_levels_a_first_fit_remainder_into_the_band():
    from autooptimize.domain.planning import PlanFile as PF
    from autooptimize.domain.planning import balance_outputs
    from autooptimize.domain.planning import plan_bin_pack as pack

    files = [PF(f"f{i}", 40, 1) for i in range(46)]  # 1840 bytes: FFD packs 1080 + 760
    plan = pack(files, 1000, 300)  # which already meets a loose tolerance
    assert min(s for g in plan.groups for s in g.output_sizes()) < 800
    balanced = balance_outputs(plan, files)
    assert all(800 <= s <= 1200 for g in balanced.groups for s in g.output_sizes())
