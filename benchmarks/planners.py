"""How fast the planners are: First Fit Decreasing on 100,000 files, Knuth–Plass on 5,000.

    python -m benchmarks.planners [--json] [--repeat N]

Goals: FFD under 1 s for 100,000 files, Knuth–Plass under 2 s for 5,000, on this machine, planner call
only (the file list is built beforehand). Each figure is the best of ``--repeat`` runs and is printed as
a ratio to its goal and beside the Iceberg size-ratio planner (``plan_iceberg_bin_pack``) timed on the
same files in the same run.
File sizes come from a seeded RNG shaped like streaming ingest: mostly micro-batch files of a few MiB,
some partly compacted ones, a few healthy. Two tolerances are timed: a quarter of the target (a
realistic setting) and 0 (the goal can never be met, so every candidate is packed and every fallback
tried: the worst case). Knuth–Plass is also timed on 5,000 files of 1 MiB (128 to a target), its worst
realistic case, since its work grows with the number of files that fit in one group.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import time
from collections.abc import Callable, Sequence
from functools import partial

from autooptimize.domain.planning import Plan, PlanFile, plan_bin_pack, plan_iceberg_bin_pack, plan_ordered

MiB = 1 << 20
TARGET = 128 * MiB
SEED = 20240611
FFD_FILES = 100_000
KP_FILES = 5_000
FFD_GOAL_SECONDS = 1.0
KP_GOAL_SECONDS = 2.0


def streaming_sizes(rng: random.Random, n: int, target: int = TARGET) -> list[int]:
    """``n`` file sizes of a partition fed by streaming ingest, relative to ``target``.

    75 % micro-batch files (log-normal around target/64, i.e. 2 MiB for 128 MiB), 18 % partly
    compacted or late files (target/16 to target), 7 % healthy files (0.9 to 2 targets).
    """
    sizes = []
    for _ in range(n):
        r = rng.random()
        if r < 0.75:
            size = int(rng.lognormvariate(math.log(target / 64), 1.0))
        elif r < 0.93:
            size = rng.randint(target // 16, target)
        else:
            size = rng.randint(target * 9 // 10, 2 * target)
        sizes.append(max(1, size))
    return sizes


def plan_files(
    sizes: Sequence[int], prefix: str = "s3://lake/db/events/data/dt=2024-06-11"
) -> list[PlanFile]:
    return [PlanFile(f"{prefix}/{i:06d}.parquet", s, record_count=s // 200) for i, s in enumerate(sizes)]


def best_of(repeat: int, run: Callable[[], Plan]) -> tuple[float, Plan]:
    """Fastest wall time of ``repeat`` calls, with the plan of the last one."""
    fastest = math.inf
    plan = run()  # warm-up: imports, allocator
    for _ in range(repeat):
        start = time.perf_counter()
        plan = run()
        fastest = min(fastest, time.perf_counter() - start)
    return fastest, plan


FFD_CASES = (("t_quarter", "tolerance = target/4"), ("t_zero", "tolerance = 0 (worst case)"))
KP_CASES = (
    ("t_quarter", "streaming, tolerance = target/4"),
    ("t_zero", "streaming, tolerance = 0"),
    ("tiny_t_quarter", "all 1 MiB (128 per group), tolerance = target/4"),
    ("tiny_t_zero", "all 1 MiB (128 per group), tolerance = 0"),
)


def measure(repeat: int) -> dict[str, float | int | bool | str]:
    """Every figure, keyed for the JSON line; ``ffd_seconds``/``kp_seconds`` are the worst cases."""
    ffd_input = plan_files(streaming_sizes(random.Random(SEED), FFD_FILES))
    kp_input = plan_files(streaming_sizes(random.Random(SEED + 1), KP_FILES))
    kp_tiny = plan_files([MiB] * KP_FILES)
    quarter = TARGET // 4
    rows: dict[str, float | int | bool | str] = {}

    iceberg_100k, _ = best_of(repeat, partial(plan_iceberg_bin_pack, ffd_input, TARGET))
    ffd: list[float] = []
    for (name, _), tolerance in zip(FFD_CASES, (quarter, 0), strict=True):
        seconds, plan = best_of(repeat, partial(plan_bin_pack, ffd_input, TARGET, tolerance))
        ffd.append(seconds)
        rows[f"ffd_100k_{name}_seconds"] = seconds
        rows[f"ffd_100k_{name}_files_in"] = plan.files_in
        rows[f"ffd_100k_{name}_iceberg_rule_seconds"] = iceberg_100k
    kp: list[float] = []
    inputs = ((kp_input, quarter), (kp_input, 0), (kp_tiny, quarter), (kp_tiny, 0))
    for (name, _), (files, tolerance) in zip(KP_CASES, inputs, strict=True):
        seconds, plan = best_of(repeat, partial(plan_ordered, files, TARGET, tolerance))
        baseline, _ = best_of(repeat, partial(plan_iceberg_bin_pack, files, TARGET))
        kp.append(seconds)
        rows[f"kp_5k_{name}_seconds"] = seconds
        rows[f"kp_5k_{name}_files_in"] = plan.files_in
        rows[f"kp_5k_{name}_iceberg_rule_seconds"] = baseline
    rows.update(
        ffd_seconds=max(ffd),
        ffd_goal_seconds=FFD_GOAL_SECONDS,
        ffd_ratio_to_goal=max(ffd) / FFD_GOAL_SECONDS,
        kp_seconds=max(kp),
        kp_goal_seconds=KP_GOAL_SECONDS,
        kp_ratio_to_goal=max(kp) / KP_GOAL_SECONDS,
        meets_goals=max(ffd) < FFD_GOAL_SECONDS and max(kp) < KP_GOAL_SECONDS,
        ffd_files=FFD_FILES,
        kp_files=KP_FILES,
        seed=SEED,
        repeat=repeat,
        python=platform.python_version(),
    )
    return rows


def report(rows: dict[str, float | int | bool | str]) -> str:
    """The human-readable table: every time beside its goal and the Iceberg rule's time, as ratios."""

    def line(label: str, seconds: float, goal: float, baseline: float) -> str:
        return (
            f"  {label:<48} {seconds:7.3f} s   goal {goal:.1f} s  ratio {seconds / goal:5.2f}"
            f"   Iceberg rule {baseline:.3f} s  ratio {seconds / baseline:5.2f}"
        )

    out = [f"First Fit Decreasing, {FFD_FILES:,} streaming files"]
    for name, label in FFD_CASES:
        key = f"ffd_100k_{name}"
        out.append(
            line(
                label,
                float(rows[f"{key}_seconds"]),
                FFD_GOAL_SECONDS,
                float(rows[f"{key}_iceberg_rule_seconds"]),
            )
        )
    out.append(f"Knuth–Plass, {KP_FILES:,} files")
    for name, label in KP_CASES:
        key = f"kp_5k_{name}"
        out.append(
            line(
                label,
                float(rows[f"{key}_seconds"]),
                KP_GOAL_SECONDS,
                float(rows[f"{key}_iceberg_rule_seconds"]),
            )
        )
    out.append(
        f"worst: FFD {float(rows['ffd_seconds']):.3f} s (ratio to goal {float(rows['ffd_ratio_to_goal']):.2f}), "
        f"Knuth–Plass {float(rows['kp_seconds']):.3f} s (ratio to goal {float(rows['kp_ratio_to_goal']):.2f}): "
        f"{'meets' if rows['meets_goals'] else 'MISSES'} the goals"
    )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.planners", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per figure; the best counts")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    rows = measure(args.repeat)
    print(report(rows))
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    return 0 if rows["meets_goals"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
