"""How close any tuning of the live-partition policy comes to the live-ingest goal, per trace: pure, no I/O.

    python -m benchmarks.policy_frontier [--seed 7 --seed 8 ...] [--target 8MiB] [--commits 300] [--latency 1.0]
                                         [--no-late-horizon] [--pareto] [--json]

The live-ingest goal of ``benchmarks.streaming`` is two figures at once: mean live files at most the
blocking bin-pack's (every 20 writes) and write amplification (WA) at most 1.5. For each seeded trace
of ``benchmarks.streaming`` (``benchmarks.trace``: ``--commits`` (300) at 1.6/s, 60 per hour), this replays the
same writes through the bin-pack and through the policy with every tuning of a grid (fan-in, settle,
cold-after, each partition's own cold-after factor, quiet merging: :data:`GRID`) in
:mod:`autooptimize.domain.simulate`, and prints, beside the bin-pack's figures:

* whether any tuning meets both figures;
* the least WA among the tunings that keep mean live files at most the bin-pack's, as a ratio to 1.5;
* the fewest mean live files among the tunings with WA at most 1.5, as a ratio to the bin-pack's;
* the shipped defaults' point;
* with ``--pareto``, every tuning on the frontier (no other has both fewer live files and less WA).

Merges land ``--latency`` seconds after the write that prompted them: 1.0 s is what AutoAnalyze learned
from a live run of ``benchmarks.streaming`` on this machine (docs/policy-history.md). Exit code 1 when the run
did no work (no bytes written, or no tuning and no bin-pack rewrote anything).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from autooptimize.domain.goals import WRITE_AMPLIFICATION_GOAL
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import Figures, simulate_baseline, simulate_policy
from autooptimize.domain.sizes import parse_size
from autooptimize.errors import InvalidArgument
from benchmarks.policy_sim import streaming_writes

#: (fan-ins, settle seconds, cold-after seconds, cold gap factors, quiet merging) searched per trace.
GRID: tuple[tuple[Any, ...], ...] = (
    (6, 8, 10, 12, 14, 16, 20, 24),
    (1.0, 3.0, 6.0),
    (10.0, 20.0, 30.0, 60.0),
    (0.0, 2.0, 4.0, 8.0),
    (False, True),
)


@dataclass(frozen=True)
class Point:
    tuning: PolicyTuning
    live_ratio: float  # mean live files / the bin-pack's
    write_amplification: float
    end_files: int

    def as_dict(self) -> dict[str, Any]:
        return {"tuning": self.tuning.as_dict(), "live_ratio": round(self.live_ratio, 4),
                "write_amplification": round(self.write_amplification, 4), "end_files": self.end_files}


def point(tuning: PolicyTuning, f: Figures, base: Figures) -> Point:
    return Point(tuning, f.mean_live_files / base.mean_live_files, f.write_amplification, f.end_files)


def pareto(points: list[Point]) -> list[Point]:
    """The points no other beats on both live files and WA, by rising WA."""
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.write_amplification, p.live_ratio)):
        if not out or p.live_ratio < out[-1].live_ratio:
            out.append(p)
    return out


def frontier(seed: int, target: int, latency: float, commits: int = 300,
             late_horizon: bool = True) -> dict[str, Any]:
    writes = streaming_writes(seed, commits)
    base = simulate_baseline(writes, target)
    points = []
    for fan_in, settle, cold, factor, quiet in itertools.product(*GRID):
        tuning = PolicyTuning(target, fan_in, settle, max(cold, settle), quiet_merge=quiet, cold_gap_factor=factor,
                              late_horizon=late_horizon)
        points.append(point(tuning, simulate_policy(writes, tuning, latency), base))
    defaults = PolicyTuning(target, late_horizon=late_horizon)
    shipped = point(defaults, simulate_policy(writes, defaults, latency), base)
    within_files = [p for p in points if p.live_ratio <= 1.0]
    within_wa = [p for p in points if p.write_amplification <= WRITE_AMPLIFICATION_GOAL]
    least_wa = min(within_files, key=lambda p: p.write_amplification, default=None)
    fewest = min(within_wa, key=lambda p: p.live_ratio, default=None)
    return {
        "seed": seed, "target": target, "latency": latency, "late_horizon": late_horizon, "tunings": len(points),
        "bytes_written": base.bytes_written,
        "rewrote": base.bytes_rewritten > 0 and any(p.write_amplification > 0 for p in points),
        "binpack": {"mean_live_files": round(base.mean_live_files, 3),
                    "write_amplification": round(base.write_amplification, 4), "end_files": base.end_files},
        "goal_met_by": [p.as_dict() for p in within_files if p.write_amplification <= WRITE_AMPLIFICATION_GOAL],
        "least_wa_at_binpack_files": least_wa.as_dict() if least_wa else None,
        "fewest_files_at_wa_goal": fewest.as_dict() if fewest else None,
        "defaults": shipped.as_dict(),
        "pareto": [p.as_dict() for p in pareto(points)],
    }


def _tuning_text(t: dict[str, Any]) -> str:
    return (f"fan-in {t['fan_in']}, settle {t['settle_seconds']:g} s, cold after {t['cold_after_seconds']:g} s, "
            f"gaps × {t['cold_gap_factor']:g}, quiet merge {'on' if t['quiet_merge'] else 'off'}")


def report(r: dict[str, Any], show_pareto: bool) -> None:
    b = r["binpack"]
    print(f"seed {r['seed']}: bin-pack {b['mean_live_files']:.2f} mean live files, WA {b['write_amplification']:.2f}"
          f" ({b['write_amplification'] / WRITE_AMPLIFICATION_GOAL:.2f}× the goal of 1.5); "
          f"{r['tunings']} tunings, merges landing {r['latency']:g} s after their write")
    print(f"  goal (live files ≤ 1.00× the bin-pack's and WA ≤ 1.5) met by {len(r['goal_met_by'])} tunings")
    d = r["defaults"]
    print(f"  shipped defaults:                 {d['live_ratio']:.3f}× the bin-pack's live files, "
          f"WA {d['write_amplification']:.2f} ({d['write_amplification'] / WRITE_AMPLIFICATION_GOAL:.2f}× 1.5)")
    lw, fw = r["least_wa_at_binpack_files"], r["fewest_files_at_wa_goal"]
    if lw:
        print(f"  least WA at ≤ 1.00× live files:   WA {lw['write_amplification']:.2f} "
              f"({lw['write_amplification'] / WRITE_AMPLIFICATION_GOAL:.2f}× 1.5) at {lw['live_ratio']:.3f}×: {_tuning_text(lw['tuning'])}")
    else:
        print("  no tuning keeps live files ≤ 1.00× the bin-pack's")
    if fw:
        print(f"  fewest live files at WA ≤ 1.5:    {fw['live_ratio']:.3f}× the bin-pack's at WA "
              f"{fw['write_amplification']:.2f}: {_tuning_text(fw['tuning'])}")
    else:
        print("  no tuning keeps WA ≤ 1.5")
    if show_pareto:
        for p in r["pareto"]:
            print(f"    pareto: {p['live_ratio']:.3f}× live, WA {p['write_amplification']:.2f}, "
                  f"{p['end_files']} files at the end: {_tuning_text(p['tuning'])}")


def trace_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of a tool over benchmarks.streaming's seeded traces: --seed, --target, --commits."""
    ap.add_argument("--seed", type=int, action="append", help="a trace seed (repeatable); default 7, 8, 3, 11")
    ap.add_argument("--target", default="8MiB", help="the target file size (default 8MiB, the benchmark's)")
    ap.add_argument("--commits", type=int, default=300, help="commits per trace (benchmarks.streaming --commits)")


def checked_target(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The target in bytes, after refusing (through ``ap.error``) too few commits or a nonsense size."""
    if args.commits < 20:
        ap.error(f"--commits must be at least 20 (one bin-pack), got {args.commits}")
    if hasattr(args, "latency") and not args.latency >= 0:
        ap.error(f"--latency must be seconds ≥ 0, got {args.latency}")
    try:
        return parse_size(args.target)
    except InvalidArgument as e:
        ap.error(f"--target: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    trace_arguments(ap)
    ap.add_argument("--latency", type=float, default=1.0, help="seconds from a write to its merge's commit")
    ap.add_argument("--late-horizon", action=argparse.BooleanOptionalAction, default=True,
                    help="finish a partition past the table's late horizon at once (the default, as the service)")
    ap.add_argument("--pareto", action="store_true", help="also every tuning on the frontier")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    target = checked_target(ap, args)
    started = time.monotonic()
    results = [frontier(seed, target, args.latency, args.commits, args.late_horizon) for seed in (args.seed or [7, 8, 3, 11])]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            report(r, args.pareto)
        met = sum(bool(r["goal_met_by"]) for r in results)
        print(f"\nthe goal is within the policy's reach on {met} of {len(results)} traces; "
              f"{time.monotonic() - started:.0f} s")
    return 0 if all(r["bytes_written"] and r["rewrote"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
