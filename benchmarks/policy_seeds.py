"""The live-partition policy on workloads it was not tuned on: each member of the trace family, and
``benchmarks.streaming``'s trace, with its commits drawn from other seeds, beside the bin-pack.

    python -m benchmarks.policy_seeds [--variants 4] [--first 0] [--member NAME ...] [--no-streaming]
                                      [--fan-in N] [--price K] [--cold-gap-factor K] [--json]

The policy's constants were chosen on the family's own seeds (variant 0). Here every member is replayed at
variants ``--first`` … ``--first + --variants − 1`` (:func:`benchmarks.trace_family.variant`: the same
shape, another seed), and the streaming trace at seeds 7, 8, 3 and 11, each plus 100 × the variant, at
8 and 128 MiB. Each replay is on the service listener's clock at the service's measured timings (merges
land 0.45 s after they are decided and plan 0.22 s after; timers judged 0.85 s late; ``--latency``,
``--start-delay``, ``--timer-lag``), as ``benchmarks.policy_sim --clock`` replays, beside a blocking
bin-pack every 20 writes of the same commits.

Printed: per workload, mean live files and write amplification of the policy beside the bin-pack's (the
ratio in brackets); then how many workloads keep mean live files ≤ 1.05× the bin-pack's, how many keep
that and write amplification ≤ 1.5 together, and the workload with the most files against its
bin-pack. Exits 1 when it replayed nothing (no member matched, or the replays wrote nothing).
Pure and seeded: no I/O; about 25 s for the default 80 workloads.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from autooptimize.domain.policy import DEFAULT_COLD_GAP_FACTOR, DEFAULT_FAN_IN, PolicyTuning
from autooptimize.domain.priced import DEFAULT_PRICE
from autooptimize.domain.simulate import BASELINE_EVERY, Write
from benchmarks.policy_sim import GOALS, compare, family_writes, streaming_writes
from benchmarks.trace_family import FAMILY, variant

MiB = 1 << 20
#: The streaming trace's seeds (``benchmarks.streaming --seed``), each shifted by 100 × the variant.
STREAMING_SEEDS = (7, 8, 3, 11)
FILES_GOAL = GOALS["mean_live_files"]
WA_GOAL = GOALS["write_amplification"]


def workloads(members: Sequence[str], first: int, count: int, streaming: bool
              ) -> Iterator[tuple[str, int, list[Write]]]:
    """(name, target, writes) of every workload asked for."""
    for m in FAMILY:
        if members and not any(m.name.startswith(x) for x in members):
            continue
        for k in range(first, first + count):
            v = variant(m, k)
            yield v.name, v.target, family_writes(v)
    if streaming and not members:
        for seed in STREAMING_SEEDS:
            for k in range(first, first + count):
                writes = streaming_writes(seed + 100 * k)
                for mib in (8, 128):
                    yield f"streaming seed {seed + 100 * k} @ {mib} MiB", mib * MiB, writes


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What held, from each row's own verdicts (``policy_sim.compare``'s ``ok``)."""
    files_ok = [r for r in rows if r["ok"]["mean_live_files"]]
    both = [r for r in files_ok if r["ok"]["write_amplification"]]
    worst = max(rows, key=lambda r: r["ratio"]["mean_live_files"])
    return {"workloads": len(rows), "files_goal_held": len(files_ok), "files_and_wa_goals_held": len(both),
            "most_files": {"workload": worst["member"], "ratio": worst["ratio"]["mean_live_files"]},
            "files_goal_missed": sorted(r["member"] for r in rows if not r["ok"]["mean_live_files"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--variants", type=int, default=4, help="variants of each workload (default 4)")
    ap.add_argument("--first", type=int, default=0, help="the first variant (default 0: the family's own seeds)")
    ap.add_argument("--member", action="append", help="a member name or prefix (repeatable; no streaming trace)")
    ap.add_argument("--no-streaming", dest="streaming", action="store_false", help="the family only")
    ap.add_argument("--fan-in", type=int, default=DEFAULT_FAN_IN)
    ap.add_argument("--price", type=int, default=DEFAULT_PRICE)
    ap.add_argument("--cold-gap-factor", type=float, default=DEFAULT_COLD_GAP_FACTOR)
    ap.add_argument("--latency", type=float, default=0.45)
    ap.add_argument("--start-delay", type=float, default=0.22)
    ap.add_argument("--timer-lag", type=float, default=0.85)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.variants < 1 or args.first < 0:
        ap.error(f"--variants must be ≥ 1 and --first ≥ 0, got {args.variants} and {args.first}")
    if not 0 <= args.start_delay <= args.latency or args.timer_lag < 0:
        ap.error("need 0 ≤ --start-delay ≤ --latency and --timer-lag ≥ 0")
    started = time.monotonic()
    rows = []
    for name, target, writes in workloads(args.member or [], args.first, args.variants, args.streaming):
        tuning = PolicyTuning(target, args.fan_in, price=args.price, cold_gap_factor=args.cold_gap_factor)
        rows.append(compare(name, writes, tuning, BASELINE_EVERY, latency=args.latency, start_delay=args.start_delay,
                            timer_lag=args.timer_lag, clock=True))
    if not rows or not any(r["policy"]["bytes_written"] for r in rows):
        print(f"nothing replayed: no workload matches {args.member}")
        return 1
    s = summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": s}, indent=2))
        return 0
    print(f"price {args.price}, fan-in {args.fan_in}, cold gap factor {args.cold_gap_factor:g}; variants "
          f"{args.first}–{args.first + args.variants - 1}; on the listener's clock; beside a bin-pack every {BASELINE_EVERY} writes")
    print(f"{'workload':<40} {'mean live files':>24} {'write amplification':>24}")
    for r in rows:
        p, b, x = r["policy"], r["baseline"], r["ratio"]
        print(f"{r['member']:<40} {p['mean_live_files']:>9.1f}/{b['mean_live_files']:<6.1f} ({x['mean_live_files']:.2f}) "
              f"{p['write_amplification']:>11.2f}/{b['write_amplification']:<5.2f} ({x['write_amplification']:.2f})")
    print(f"\nmean live files ≤ {FILES_GOAL}× the bin-pack's on {s['files_goal_held']}/{s['workloads']} workloads; "
          f"with write amplification ≤ {WA_GOAL} too on {s['files_and_wa_goals_held']}; the most files: "
          f"{s['most_files']['workload']} at {s['most_files']['ratio']:.2f}× the bin-pack's; "
          f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
