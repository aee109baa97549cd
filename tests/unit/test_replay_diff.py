"""benchmarks.replay_diff: where the service's merges and the replay's first part, partition by partition."""

from __future__ import annotations

from autooptimize.domain.simulate import TimePartition
from benchmarks.replay_diff import Step, first_parting, key_of, report


def test_the_first_merge_that_reads_other_files_is_where_the_sides_part() -> None:
    a = [Step(10, 4, 300_000, "tiered"), Step(20, 12, 2_000_000, "tiered"), Step(30, 4, 250_000, "tiered")]
    # the same files weigh a few per cent apart in the replay (its mean output ratio): still the same merge
    b = [Step(10, 4, 310_000, "tiered"), Step(21, 12, 2_050_000, "tiered"), Step(29, 3, 120_000, "tiered")]
    assert first_parting(a, b) == 2
    assert first_parting(a, a) is None
    assert first_parting(a, a[:2]) == 2  # one side made a merge more
    assert first_parting([Step(1, 4, 100_000, "tiered")], [Step(1, 4, 120_000, "tiered")]) == 0  # 17 % apart


def test_the_report_gives_each_partitions_totals_and_the_merges_around_the_parting() -> None:
    same = [Step(5, 4, 200_000, "tiered")]
    live = {"[1]": same, "[2]": [Step(8, 4, 300_000, "tiered"), Step(9, 9, 8_000_000, "cold_finish")]}
    replay = {"[1]": same, "[2]": [Step(8, 4, 300_000, "tiered"), Step(12, 3, 100_000, "tiered")]}
    lines = report(live, replay)
    assert lines[0] == "partition [1]: service 1 merges, 4 files, 0.2 MB; replay 1 merges, 4 files, 0.2 MB"
    assert lines[1] == "  the same merges"
    assert lines[2].startswith("partition [2]: service 2 merges, 13 files, 8.3 MB; replay 2 merges, 7 files")
    assert lines[3] == "  first parted at merge 2:"
    assert lines[5].startswith("  >   2  service after write 9: 9 files, 8.00 MB (cold_finish)")
    assert lines[5].endswith("replay after write 12: 3 files, 0.10 MB (tiered)")
    assert len(lines) == 6
    assert key_of(TimePartition(0, 492336, "[492336]")) == "[492336]" and key_of("p") == "p"
