"""Minimal replacement against Iceberg's size-ratio rule: bytes and files rewritten at equal health.

    python -m benchmarks.binpack_compare [--json]

For each seeded streaming-like partition, the baseline (``plan_iceberg_bin_pack``: every file under
0.75 or over 1.8 targets, packed into groups of a target, groups of fewer than 5 files dropped, no
stop) is planned first. Its final MSE sets the bar: our planner runs with the tolerance ``T`` whose
square is the largest integer square not above the baseline's final MSE, so when it reaches its goal
(MSE < T²) it ends at least as healthy as the baseline. What is compared is then what it cost: bytes
rewritten and files replaced, as ratios ours / baseline (below 1 is better), all from the same run.
Ours here is the First Fit Decreasing planner: like the baseline, it may regroup files in any order.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, plan_bin_pack, plan_iceberg_bin_pack
from benchmarks.planners import SEED, TARGET, MiB, plan_files, streaming_sizes

GiB = 1 << 30


def micro_batches(rng: random.Random, n: int) -> list[int]:
    """Only micro-batch files: log-normal around 1 MiB (a high-frequency writer)."""
    return [max(1, int(rng.lognormvariate(math.log(MiB), 0.8))) for _ in range(n)]


def late_data(rng: random.Random, n: int) -> list[int]:
    """A partition that keeps receiving late rows after compaction: healthy files plus trickles."""
    return [
        rng.randint(TARGET * 9 // 10, TARGET * 3 // 2)
        if rng.random() < 0.6
        else rng.randint(MiB // 4, 24 * MiB)
        for _ in range(n)
    ]


def mixed_writers(rng: random.Random, n: int) -> list[int]:
    """Streaming files plus mid-sized batch files (target/8 to 3/4 target) from a second writer."""
    return [
        streaming_sizes(rng, 1)[0] if rng.random() < 0.7 else rng.randint(TARGET // 8, TARGET * 3 // 4)
        for _ in range(n)
    ]


PARTITIONS: tuple[tuple[str, Callable[[random.Random, int], list[int]], int], ...] = (
    ("streaming-300", streaming_sizes, 300),
    ("streaming-3k", streaming_sizes, 3_000),
    ("streaming-30k", streaming_sizes, 30_000),
    ("micro-batches-2k", micro_batches, 2_000),
    ("late-data-1k", late_data, 1_000),
    ("mixed-writers-5k", mixed_writers, 5_000),
)


@dataclass(frozen=True)
class Outcome:
    """What one plan costs and where it leaves the partition (exact figures)."""

    planner: str
    sse: int
    n: int
    bytes_rewritten: int
    files_replaced: int
    files_written: int

    @property
    def mse(self) -> float:
        return self.sse / self.n if self.n else 0.0

    @property
    def rms_mib(self) -> float:
        return math.sqrt(self.mse) / MiB

    def healthy_as(self, other: Outcome) -> bool:
        """Final MSE at or below ``other``'s, compared exactly."""
        return self.sse * other.n <= other.sse * self.n


@dataclass(frozen=True)
class Comparison:
    """One partition: its shape, the tolerance our planner got, and both outcomes."""

    partition: str
    files: int
    gib: float
    rms_before_mib: float
    tolerance: int
    baseline: Outcome
    ours: Outcome

    @property
    def bytes_ratio(self) -> float | None:
        return (
            self.ours.bytes_rewritten / self.baseline.bytes_rewritten
            if self.baseline.bytes_rewritten
            else None
        )

    @property
    def files_ratio(self) -> float | None:
        return (
            self.ours.files_replaced / self.baseline.files_replaced if self.baseline.files_replaced else None
        )


def outcome(name: str, plan: Plan, files: Sequence[PlanFile]) -> Outcome:
    """Recompute the partition after ``plan`` from scratch, from the plan's own groups."""
    grouped = {f.path for g in plan.groups for f in g.files}
    sizes = [f.size for f in files if f.path not in grouped] + [
        s for g in plan.groups for s in g.output_sizes()
    ]
    after = EntropyStats.from_sizes(sizes, plan.target)
    return Outcome(name, after.sse, after.n, plan.bytes_rewritten, plan.files_in, plan.files_out)


def compare(name: str, files: Sequence[PlanFile]) -> Comparison:
    before = EntropyStats.from_sizes([f.size for f in files], TARGET)
    baseline = outcome("iceberg-rule", plan_iceberg_bin_pack(files, TARGET), files)
    # the largest T with T² ≤ the baseline's final MSE: reaching MSE < T² means ending at least as healthy
    tolerance = math.isqrt(baseline.sse // baseline.n) if baseline.n else 0
    ours = outcome("ours-ffd", plan_bin_pack(files, TARGET, tolerance), files)
    return Comparison(
        name,
        len(files),
        sum(f.size for f in files) / GiB,
        math.sqrt(before.mse) / MiB,
        tolerance,
        baseline,
        ours,
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(rows: Sequence[Comparison]) -> str:
    head = (
        f"{'partition':<18}{'planner':<14}{'RMS error MiB':>14}{'≤ baseline':>11}{'GiB rewritten':>15}"
        f"{'ratio':>7}{'files replaced':>16}{'ratio':>7}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r.partition:<18}{'(before)':<14}{r.rms_before_mib:>14.2f}"
            f"   {r.files:,} files, {r.gib:.1f} GiB; our tolerance {r.tolerance / MiB:.2f} MiB"
        )
        for o, br, fr in ((r.baseline, 1.0, 1.0), (r.ours, r.bytes_ratio, r.files_ratio)):
            out.append(
                f"{'':<18}{o.planner:<14}{o.rms_mib:>14.2f}{'yes' if o.healthy_as(r.baseline) else 'NO':>11}"
                f"{o.bytes_rewritten / GiB:>15.2f}{_ratio(br):>7}{o.files_replaced:>16,}{_ratio(fr):>7}"
            )
    return "\n".join(out)


def as_json(rows: Sequence[Comparison]) -> dict[str, object]:
    def figures(o: Outcome) -> dict[str, object]:
        return {
            "final_mse": o.mse,
            "bytes_rewritten": o.bytes_rewritten,
            "files_replaced": o.files_replaced,
            "files_written": o.files_written,
        }

    base_bytes = sum(r.baseline.bytes_rewritten for r in rows)
    base_files = sum(r.baseline.files_replaced for r in rows)
    ours_bytes = sum(r.ours.bytes_rewritten for r in rows)
    ours_files = sum(r.ours.files_replaced for r in rows)
    return {
        "seed": SEED,
        "target": TARGET,
        "partitions": [
            {
                "partition": r.partition,
                "files": r.files,
                "tolerance": r.tolerance,
                "baseline": figures(r.baseline),
                "ours": figures(r.ours),
                "ours_mse_le_baseline": r.ours.healthy_as(r.baseline),
                "bytes_ratio": r.bytes_ratio,
                "files_ratio": r.files_ratio,
            }
            for r in rows
        ],
        "total_bytes_ratio": ours_bytes / base_bytes,
        "total_files_ratio": ours_files / base_files,
        "ours_mse_le_baseline_everywhere": all(r.ours.healthy_as(r.baseline) for r in rows),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.binpack_compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    args = parser.parse_args(argv)
    rows = [
        compare(name, plan_files(make(random.Random(SEED + 100 + i), n), prefix=f"s3://lake/{name}"))
        for i, (name, make, n) in enumerate(PARTITIONS)
    ]
    print(report(rows))
    summary = as_json(rows)
    healthy = summary["ours_mse_le_baseline_everywhere"]
    print(
        f"all partitions: ours rewrites {summary['total_bytes_ratio']:.2f}x the bytes and replaces "
        f"{summary['total_files_ratio']:.2f}x the files of the Iceberg rule, ending "
        f"{'at least as healthy everywhere' if healthy else 'LESS HEALTHY somewhere'}"
    )
    if args.json:
        print(json.dumps(summary))
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
