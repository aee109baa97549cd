"""A candidate live rule priced in files against bytes, replayed beside the shipped policy and the bin-pack:
pure, no I/O. An experiment, not the service's rule.

    python -m benchmarks.policy_priced [--seed 7 --seed 8 ...] [--target 8MiB] [--commits 300]
                                       [--latency 0.4 --latency 1.0] [--price 32 ...] [--ratio 2.5 ...]
                                       [--jitter 0.3 --repeats 6] [--output-ratio 0.965] [--start-delay 0.35]
                                       [--family] [--json]

``benchmarks.policy_foresight`` found that a schedule knowing every write needs 5–15 % less than the
goal's write amplification (WA) of 1.5 at the bin-pack's live files, where no tuning of the shipped
policy comes under 1.59. It spends its file budget differently: it merges the small partitions that
only late data reaches at once, and in the hour being written it lets the writer's files gather and
writes each one about once. This rule tries that online. While a partition is written (not cold):

* **filled**: once its files under ¾ of the target weigh ``--fill`` (15/16) of a target, they are packed,
  largest first, into one file of at most 5/4 of a target (priced.FILL_CAP);
* **priced**: otherwise, among the ascending prefixes of its small files in which no file is more than
  ``--ratio`` times the bytes before it, the one with the greatest ``(k − 1) · life − bytes`` is merged
  when that is positive. ``k`` is the prefix's files. ``life`` prices a file saved: in the newest time
  partition of its spec it is the bytes still to come before the fill (``target − small bytes``) divided
  by ``--price``; elsewhere (a partition only late data reaches) it is unbounded, so its small files
  merge as soon as two of similar size are there;
* cold, and in a partition that has not received and is not expected to hold a target's bytes (its
  scale is under the target: ``--everywhere`` drops this), the shipped policy's own rules apply.

A partition within the excess rule is left alone first, as by the policy (on the four streaming traces
that changes no figure).

``--jitter S --repeats N`` replays each trace N times with every commit delayed by a seeded uniform draw
in [0, S) seconds (kept in order) and prints the means: a live writer's commits do not land at nominal
times, and one replay of a trace can sit on either side of a goal by chance. ``--output-ratio R``: a
writer's bytes weigh R once first merged (``simulate_policy``'s ``output_ratio``; live on benchmarks.streaming's
trace the service's merges write about 0.965 of what they read). ``--start-delay S``: each merge plans S
seconds after its decision, as the service's action plans when it starts (about 0.3-0.37 s after the write
on benchmarks.streaming's trace), and lands at the latency (default: it plans as it lands, taking in the
files written meanwhile). Write amplification stays bytes read over
bytes written, as everywhere in the simulator; benchmarks.streaming counts the bytes the merges wrote.

It needs nothing the service lacks: the newest ordinal of each spec is ``ao_spec_spans.newest``.
Printed per trace: the bin-pack's figures, and the shipped defaults' and each priced variant's mean
live files as a ratio to the bin-pack's, with WA; ``*`` marks a point meeting both goals (≤ 1.00× the
bin-pack's files, WA ≤ 1.5, and files and excess MSE at the end within 10 % of the bin-pack's; ``e``
marks an end layout outside that). ``--family`` runs the 12 members of ``benchmarks.trace_family`` at
their own targets instead (goal: ≤ 1.05× files). Exit code 1 when the run did no work.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from autooptimize.domain.entropy import excess_needs_attention
from autooptimize.domain.goals import WRITE_AMPLIFICATION_GOAL, end_layout_holds
from autooptimize.domain.planning import Plan
from autooptimize.domain.planning.essential import MeasuredFiles
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.priced import FILL, priced_group
from autooptimize.domain.simulate import (
    Figures,
    PartitionState,
    Planner,
    Write,
    simulate_baseline,
    simulate_policy,
)
from benchmarks.policy_frontier import checked_target, trace_arguments
from benchmarks.policy_sim import family_writes, streaming_writes
from benchmarks.trace_family import FAMILY

#: The service's fill (priced.FILL) as a share of a target, the default of --fill.
SERVICE_FILL = FILL[0] / FILL[1]


def priced_planner(price: float, ratio: float, fill: float = SERVICE_FILL, everywhere: bool = False) -> Planner:
    """The rule of the module doc with ``price`` (bytes to come per file saved, as a divisor), ``ratio``
    and ``fill`` (the share of a target the small files weigh when they are packed); with ``everywhere``,
    also in partitions not expected to fill a target."""
    if not price > 0 or not ratio >= 1 or not 0 < fill <= 1.5:
        raise ValueError(f"need price > 0, ratio ≥ 1 and 0 < fill ≤ 1.5; got {price}, {ratio}, {fill}")
    share = Fraction(fill).limit_denominator(1000)
    share_pair = (share.numerator, share.denominator)

    def plan(state: PartitionState) -> tuple[Plan, str] | None:
        if state.cold or not everywhere and max(state.received_bytes, state.expected_bytes or 0) < state.tuning.target:
            return None
        target = state.tuning.target
        m = MeasuredFiles.checked(state.files, target, state.tuning.tolerance)
        sizes = m.sizes
        if not excess_needs_attention(m.before.sse, m.before.n, sum(min(x, target) for x in sizes), target,
                                      m.tolerance):
            return None  # within the excess rule: the policy's below_excess
        by_size = sorted(range(len(sizes)), key=lambda i: (sizes[i], m.files[i].path))
        group, rule = priced_group(sizes, by_size, target, price, state.newest, ratio, share_pair,
                                   out_sizes=[f.rewritten_size for f in m.files])  # as plan_partition does
        return m.plan([group] if group else []), rule

    return plan


def _point(f: Figures, base: Figures) -> dict[str, Any]:
    """``f`` beside the bin-pack's: live ratio, WA, and whether the end layout is within 10 % of its (files,
    and excess MSE with 1 MiB² of slack, as benchmarks.policy_sim judges it)."""
    end_ok = end_layout_holds(f, base)
    return {"live_ratio": round(f.mean_live_files / base.mean_live_files, 4) if base.mean_live_files else 0.0,
            "write_amplification": round(f.write_amplification, 4), "end_files": f.end_files,
            "end_excess_mse_mib2": round(f.end_excess_mse / (1 << 40), 3), "end_ok": end_ok}


def jittered(writes: Sequence[Write], jitter: float, seed: int) -> list[Write]:
    """``writes`` with each commit delayed by a uniform draw in [0, ``jitter``) seconds (``random.Random(seed)``),
    each at least 1 ms after the one before."""
    rng = random.Random(seed)
    out: list[Write] = []
    for w in writes:
        at = w.at + rng.uniform(0, jitter) if jitter else w.at
        if out and at <= out[-1].at:
            at = out[-1].at + 0.001
        out.append(Write(at, w.files))
    return out


def _mean_point(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The mean of :func:`_point` over replays; the end layout holds only if it held in every one."""
    if len(points) == 1:
        return points[0]
    digits = {"live_ratio": 4, "write_amplification": 4, "end_files": 2, "end_excess_mse_mib2": 3}
    mean = {k: round(sum(p[k] for p in points) / len(points), d) for k, d in digits.items()}
    return {**mean, "end_ok": all(p["end_ok"] for p in points)}


def trace_report(name: str, writes: Sequence[Write], target: int, latency: float,
                 variants: Sequence[tuple[float, float]], fill: float, everywhere: bool,
                 jitter: float = 0.0, repeats: int = 1, output_ratio: float = 1.0,
                 start_delay: float | None = None) -> dict[str, Any]:
    """The bin-pack, the service's defaults and each priced variant on ``writes``; with ``jitter``, the
    means over ``repeats`` replays of jittered commit times (:func:`jittered`); ``output_ratio`` and
    ``start_delay`` as :func:`~autooptimize.domain.simulate.simulate_policy`'s."""
    tuning = PolicyTuning(target)
    base = simulate_baseline(writes, target, output_ratio=output_ratio)
    replays = [jittered(writes, jitter, 1000 * k + 7) for k in range(repeats)] if jitter else [writes]
    priced: list[dict[str, Any]] = []
    out = {"trace": name, "target": target, "latency": latency, "jitter": jitter, "repeats": len(replays),
           "output_ratio": output_ratio, "start_delay": start_delay,
           "bytes_written": base.bytes_written,
           "binpack": {"mean_live_files": round(base.mean_live_files, 3),
                       "write_amplification": round(base.write_amplification, 4), "end_files": base.end_files,
                       "bytes_rewritten": base.bytes_rewritten},
           "defaults": _mean_point([_point(simulate_policy(w, tuning, latency, output_ratio=output_ratio,
                                                           start_delay=start_delay), base) for w in replays]),
           "priced": priced}
    for price, ratio in variants:
        planner = priced_planner(price, ratio, fill, everywhere)
        runs = [simulate_policy(w, tuning, latency, output_ratio=output_ratio, planner=planner, start_delay=start_delay)
                for w in replays]
        priced.append({"price": price, "ratio": ratio, **_mean_point([_point(f, base) for f in runs]),
                       "bytes_rewritten": round(sum(f.bytes_rewritten for f in runs) / len(runs))})
    return out


def _mark(p: dict[str, Any], files_goal: float) -> str:
    ok = p["live_ratio"] <= files_goal and p["write_amplification"] <= WRITE_AMPLIFICATION_GOAL and p["end_ok"]
    return f"{p['live_ratio']:.3f}×/{p['write_amplification']:.2f}{'*' if ok else ' ' if p['end_ok'] else 'e'}"


def print_report(rows: list[dict[str, Any]], files_goal: float) -> None:
    variants = [f"κ{v['price']:g} r{v['ratio']:g}" for v in rows[0]["priced"]]
    print(f"{'trace':<24}{'latency':>8}{'bin-pack files/WA':>19}{'defaults':>13}" + "".join(f"{v:>13}" for v in variants))
    for r in rows:
        b = r["binpack"]
        print(f"{r['trace']:<24}{r['latency']:>7g}s{b['mean_live_files']:>12.2f}/{b['write_amplification']:.2f}"
              f"{_mark(r['defaults'], files_goal):>13}" + "".join(f"{_mark(p, files_goal):>13}" for p in r["priced"]))
    print(f"(ratio of the bin-pack's mean live files / write amplification; * meets ≤ {files_goal:.2f}× files, WA ≤ 1.5 "
          "and the end layout; e: files or excess MSE at the end more than 10 % over the bin-pack's)")
    if rows and rows[0]["jitter"]:
        print(f"(means over {rows[0]['repeats']} replays, each commit delayed by up to {rows[0]['jitter']:g} s; "
              "e: the end layout missed in at least one)")
    if rows and rows[0].get("start_delay") is not None:
        print(f"(each merge plans {rows[0]['start_delay']:g} s after its decision, as the service's does when it starts)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    trace_arguments(ap)
    ap.add_argument("--latency", dest="latencies", type=float, action="append", help="seconds to a merge's commit (repeatable); "
                    "default 0.4 (the live service's p50) and 1.0")
    ap.add_argument("--price", type=float, action="append", help="κ (repeatable); default 32 and 48")
    ap.add_argument("--ratio", type=float, action="append", help="r (repeatable); default 2 and 2.5")
    ap.add_argument("--everywhere", action="store_true", help="the rule also where a partition's scale is under the target")
    ap.add_argument("--fill", type=float, default=SERVICE_FILL, help="share of a target at which small files are packed "
                    "(default the service's, priced.FILL)")
    ap.add_argument("--jitter", type=float, default=0.0, help="seconds: delay each commit by a seeded uniform "
                    "draw in [0, JITTER) and print the means over --repeats replays (default 0: nominal times)")
    ap.add_argument("--repeats", type=int, default=6, help="replays per trace and latency with --jitter (default 6)")
    ap.add_argument("--output-ratio", type=float, default=1.0, help="what a writer's bytes weigh once first merged "
                    "(default 1; about 0.965 live on benchmarks.streaming's trace)")
    ap.add_argument("--start-delay", type=float, default=None, help="seconds from a decision to the merge's plan "
                    "(at most every --latency; default: it plans as it lands)")
    ap.add_argument("--family", action="store_true", help="the 12 members of benchmarks.trace_family instead")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    target = checked_target(ap, args)
    variants = list(itertools.product(args.price or [32.0, 48.0], args.ratio or [2.0, 2.5]))
    try:
        priced_planner(variants[0][0], variants[0][1], args.fill)
        bad = next((v for v in variants if not v[0] > 0 or not v[1] >= 1), None)
        if bad is not None:
            raise ValueError(f"need --price > 0 and --ratio ≥ 1, got {bad[0]:g} and {bad[1]:g}")
        if any(not x >= 0 for x in args.latencies or ()):
            raise ValueError(f"--latency must be seconds ≥ 0, got {args.latencies}")
        if not 0 < args.output_ratio <= 2:
            raise ValueError(f"--output-ratio must be in (0, 2], got {args.output_ratio}")
        if args.start_delay is not None and not 0 <= args.start_delay <= min(args.latencies or [0.4, 1.0]):
            raise ValueError(f"--start-delay must be seconds within [0, every --latency], got {args.start_delay}")
        if not args.jitter >= 0 or args.repeats < 1:
            raise ValueError(f"--jitter must be seconds ≥ 0 and --repeats ≥ 1, got {args.jitter} and {args.repeats}")
    except ValueError as e:
        ap.error(str(e))
    started = time.monotonic()
    if args.family:
        traces = [(m.name, m.target, family_writes(m)) for m in FAMILY]
    else:
        traces = [(f"seed {s}", target, streaming_writes(s, args.commits)) for s in (args.seed or [7, 8, 3, 11])]
    rows = [trace_report(name, writes, tgt, lat, variants, args.fill, args.everywhere, args.jitter, args.repeats,
                         args.output_ratio, args.start_delay)
            for name, tgt, writes in traces for lat in (args.latencies or [0.4, 1.0])]
    files_goal = 1.05 if args.family else 1.0
    if args.json:
        print(json.dumps({"files_goal": files_goal, "rows": rows}, indent=2))
    else:
        print_report(rows, files_goal)
        print(f"{time.monotonic() - started:.1f} s")
    did_work = all(r["bytes_written"] for r in rows) and any(p["bytes_rewritten"] for r in rows for p in r["priced"]) \
        and any(r["binpack"]["bytes_rewritten"] for r in rows)
    return 0 if did_work else 1


if __name__ == "__main__":
    sys.exit(main())
