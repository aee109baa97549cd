"""The cold rules (domain.cold): a small partition gone cold early by its own gaps, with one dominant file,
merges only the rest until the table's cold-after time; everything else is finished as before."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autooptimize.domain import cold
from autooptimize.domain.cold import COLD_REST, cold_group
from autooptimize.domain.planning import PlanFile
from autooptimize.domain.policy import SKIP_RULES, WAIT_RULES, PolicyTuning, plan_partition
from autooptimize.domain.simulate import Write, simulate_policy
from autooptimize.errors import InvalidArgument

KB = 1000
MiB = 1 << 20
TARGET = 128 * MiB


def files_of(sizes: Sequence[int]) -> list[PlanFile]:
    return [PlanFile(f"s3://b/t/data/f{i:04d}.parquet", s) for i, s in enumerate(sizes)]


def group_of(sizes: Sequence[int], *, early: bool, whole: bool, min_input: int = 2) -> tuple[list[int], str]:
    by_size = sorted(range(len(sizes)), key=lambda i: (sizes[i], i))
    return cold_group(sizes, by_size, TARGET, min_input, early=early, whole=whole)


def test_early_in_a_small_partition_only_the_files_beside_a_dominant_one_merge() -> None:
    sizes = [30 * KB, 10_000 * KB, 20 * KB, 40 * KB]
    assert group_of(sizes, early=True, whole=True) == ([2, 0, 3], "cold_rest")
    assert group_of([10_000 * KB, 20 * KB], early=True, whole=True) == ([], "cold_wait")  # one beside it: wait
    # once cold by the table's time, or in a partition that fills the target, everything small merges
    assert group_of(sizes, early=False, whole=True) == ([2, 0, 3, 1], "cold_finish")
    assert group_of(sizes, early=True, whole=False) == ([2, 0, 3, 1], "cold_finish")
    assert group_of([10_000 * KB], early=True, whole=True) == ([], "nothing_to_merge")


def test_dominant_means_four_fifths_of_the_small_files_bytes() -> None:
    assert COLD_REST == (4, 5)
    rest = [1000 * KB, 1000 * KB]
    assert group_of([*rest, 8000 * KB], early=True, whole=True)[1] == "cold_rest"  # exactly 4/5
    assert group_of([*rest, 7999 * KB], early=True, whole=True)[1] == "cold_finish"
    # a file of 3/4 of the target or more is never small, so never the dominant one
    assert group_of([*rest, TARGET], early=True, whole=True) == ([0, 1], "cold_finish")


def test_the_plan_names_the_rule_and_reads_only_the_rest() -> None:
    files = files_of([10_000 * KB, 100 * KB, 300 * KB])
    early = plan_partition(files, TARGET, TARGET // 4, cold=True, early_cold=True, received_bytes=10_400 * KB)
    assert (early.rule, early.plan.files_in, early.plan.bytes_rewritten) == ("cold_rest", 2, 400 * KB)
    assert early.plan.files_after == 2  # the hour's file and the late bytes beside it, until the table's time
    late = plan_partition(files, TARGET, TARGET // 4, cold=True, received_bytes=10_400 * KB)
    assert (late.rule, late.plan.files_in, late.plan.files_after) == ("cold_finish", 3, 1)
    alone = plan_partition(files[:2], TARGET, TARGET // 4, cold=True, early_cold=True, received_bytes=10_100 * KB)
    assert (alone.rule, alone.plan.is_empty, alone.attention) == ("cold_wait", True, True)
    assert "cold_wait" in SKIP_RULES and "cold_wait" in WAIT_RULES  # judged again at the table's time
    # not cold: the flag changes nothing
    live = plan_partition(files, TARGET, TARGET // 4, cold=False, early_cold=True, received_bytes=10_400 * KB)
    assert live == plan_partition(files, TARGET, TARGET // 4, cold=False, received_bytes=10_400 * KB)
    with pytest.raises(InvalidArgument, match=r"early_cold must be True or False, got 'yes'"):
        plan_partition(files, TARGET, TARGET // 4, cold=True, early_cold="yes")  # type: ignore[arg-type]


def _late_trickles() -> list[Write]:
    """One small partition: 12 writes 0.5 s apart, then three bursts of four late trickles 0.5 s apart, each
    burst after the partition went cold by its gaps (5 s) but long before the table's 60 s."""
    writes = [Write(i * 0.5, (("a", 400),)) for i in range(12)]
    for start in (15.0, 30.0, 45.0):
        writes += [Write(start + i * 0.5, (("a", 10),)) for i in range(4)]
    return writes


def test_late_trickles_no_longer_reread_the_small_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same writes, with the rule and with it off (no file ever dominant): fewer bytes read, the same
    partition at the end (one file)."""
    writes, tuning = _late_trickles(), PolicyTuning(100_000, price=0)
    with_rest = simulate_policy(writes, tuning, latency=0.35)
    monkeypatch.setattr(cold, "COLD_REST", (2, 1))
    without = simulate_policy(writes, tuning, latency=0.35)
    rules = dict(with_rest.rules)
    assert rules["cold_rest"] >= 2 and rules["cold_wait"] >= 1 and "cold_rest" not in dict(without.rules)
    assert with_rest.bytes_rewritten < without.bytes_rewritten
    assert with_rest.bytes_written == without.bytes_written == 12 * 400 + 12 * 10
    assert with_rest.end_files == without.end_files == 1
