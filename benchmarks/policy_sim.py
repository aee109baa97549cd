"""The merge policy against Iceberg's periodic bin-pack on a simulated hourly stream: pure, seeded, no I/O.

    python -m benchmarks.policy_sim [--json] [--commits N] [--seed N] [--fan-in N] [--settle S]
                                    [--trace sim|streaming]

The stream: an ``hour(ts)``-partitioned table, one commit every 0.6 s and 60 commits per simulated
hour. Each commit writes one file into the current hour and, now and then, one late file into each of
the three previous hours (:data:`LATE_PROBABILITY`). Sizes are log-normal around 200 KB (late files
around 100 KB), with rare multi-MB bursts.

* **baseline**: after every 20 commits, a blocking full bin-pack of every partition with at least two
  files under 75 % of the target (``plan_iceberg_bin_pack`` with ``min_input_files=2``), applied at once.
* **policy**: after each commit every touched partition is judged live and planned
  (:func:`~autooptimize.domain.policy.plan_partition`); a partition whose newest file turns
  ``settle`` seconds old is judged settled then (the service's settle timer). A plan takes effect
  :data:`LATENCY_COMMITS` commits later (~2 s of merge latency); one merge in flight per partition, and
  the partition is judged again when it lands.

``--trace streaming`` replays instead the trace of ``benchmarks.streaming`` (benchmarks/trace.py, its
default shape with ``--seed`` and ``--commits``): 60 commits per hour, late files into the three
previous hours with probabilities 0.30, 0.15 and 0.08, bursts of 2–6 MB; only the 8 MiB target. It
reproduces that benchmark's figures closely enough to compare policies in a second instead of 15 minutes.

Figures: live files in the whole table after each commit (mean, max), write amplification (bytes
rewritten / bytes written by the writer), files replaced. Merges still in flight at the end are not
counted, nor is any merge the end of the run cuts short (the same horizon for both).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from autooptimize.domain.planning import PlanFile, RewriteGroup, balance_outputs, plan_iceberg_bin_pack
from autooptimize.domain.policy import DEFAULT_FAN_IN, DEFAULT_SETTLE_SECONDS, plan_partition

KiB = 1 << 10
MiB = 1 << 20
SEED = 20240611
COMMITS = 360
COMMIT_SECONDS = 0.6
COMMITS_PER_HOUR = 60
#: Chance per commit that each of the previous three hours receives a late file.
LATE_PROBABILITY = (0.05, 0.02, 0.01)
BURST_PROBABILITY = 0.02
BASELINE_EVERY = 20
LATENCY_COMMITS = 3
TARGETS = (128 * MiB, 8 * MiB)


def file_size(rng: random.Random, median: int) -> int:
    size = rng.lognormvariate(math.log(median), 0.5)
    if rng.random() < BURST_PROBABILITY:
        size *= rng.uniform(10, 40)
    return max(1, int(size))


def stream(seed: int, commits: int) -> list[list[tuple[int, int]]]:
    """Per commit, the ``(hour, bytes)`` of each file it writes."""
    rng = random.Random(seed)
    out = []
    for c in range(commits):
        hour = c // COMMITS_PER_HOUR
        files = [(hour, file_size(rng, 200 * KiB))]
        for back, p in enumerate(LATE_PROBABILITY, 1):
            if hour - back >= 0 and rng.random() < p:
                files.append((hour - back, file_size(rng, 100 * KiB)))
        out.append(files)
    return out


@dataclass
class Table:
    parts: dict[int, dict[str, int]] = field(default_factory=dict)
    newest: dict[int, float] = field(default_factory=dict)
    names: itertools.count = field(default_factory=itertools.count)
    written: int = 0
    rewritten: int = 0
    replaced: int = 0
    counts: list[int] = field(default_factory=list)

    def add(self, hour: int, size: int, now: float) -> None:
        self.parts.setdefault(hour, {})[f"h{hour}/f{next(self.names)}"] = size
        self.newest[hour] = now
        self.written += size

    def files(self, hour: int) -> list[PlanFile]:
        return [PlanFile(p, s) for p, s in self.parts[hour].items()]

    def apply(self, hour: int, groups: tuple[RewriteGroup, ...]) -> None:
        part = self.parts[hour]
        for g in groups:
            for f in g.files:
                del part[f.path]
            for size in g.output_sizes():
                part[f"h{hour}/m{next(self.names)}"] = size
            self.rewritten += g.bytes_in
            self.replaced += len(g.files)

    def count(self) -> None:
        self.counts.append(sum(map(len, self.parts.values())))

    def report(self) -> dict[str, float]:
        return {"mean_live_files": sum(self.counts) / len(self.counts), "max_live_files": max(self.counts),
                "write_amplification": self.rewritten / self.written, "files_replaced": self.replaced,
                "final_files": self.counts[-1]}


def run_baseline(commits: list[list[tuple[int, int]]], target: int) -> dict[str, float]:
    t = Table()
    for c, files in enumerate(commits):
        for hour, size in files:
            t.add(hour, size, c * COMMIT_SECONDS)
        if (c + 1) % BASELINE_EVERY == 0:
            for hour in t.parts:
                plan = plan_iceberg_bin_pack(t.files(hour), target, min_input_files=2, tolerance=target // 4)
                t.apply(hour, plan.groups)
        t.count()
    return t.report()


def run_policy(commits: list[list[tuple[int, int]]], target: int, fan_in: int, settle: float,
               rules: dict[str, int] | None = None) -> dict[str, float]:
    t = Table()
    tolerance = target // 4
    pending: dict[int, tuple[int, tuple[RewriteGroup, ...]]] = {}  # hour -> (lands at commit, groups)
    judged_settled: set[int] = set()

    def judge(hour: int, now: float, c: int) -> None:
        if hour in pending:
            return
        live = now - t.newest[hour] < settle
        files = t.files(hour)
        result = plan_partition(files, target, tolerance, live=live, fan_in=fan_in)
        # what the merge action runs: the policy's files, spread evenly over outputs, never grown
        plan = balance_outputs(result.plan, files, grow=False)
        if rules is not None:
            rules[result.rule] = rules.get(result.rule, 0) + 1
        if not live:
            judged_settled.add(hour)
        if plan.groups:
            pending[hour] = (c + LATENCY_COMMITS, plan.groups)

    for c, files in enumerate(commits):
        now = c * COMMIT_SECONDS
        for hour, size in files:
            t.add(hour, size, now)
            judged_settled.discard(hour)
        for hour in [h for h, (at, _) in pending.items() if at <= c]:
            t.apply(hour, pending.pop(hour)[1])
            judge(hour, now, c)
        for hour in {h for h, _ in files}:
            judge(hour, now, c)
        for hour in t.parts:  # the settle timer
            if hour not in judged_settled and now - t.newest[hour] >= settle:
                judge(hour, now, c)
        t.count()
    return t.report()


def streaming_trace(seed: int, commits: int) -> list[list[tuple[int, int]]]:
    """The commits of ``benchmarks.streaming``'s trace, as ``(hour, bytes)`` per file."""
    from benchmarks.trace import TraceShape, make_trace

    return [[(f.hour, f.drawn_bytes) for f in c.files] for c in make_trace(TraceShape(commits=commits, seed=seed))]


def simulate(seed: int, commits: int, fan_in: int, settle: float, trace: str = "sim") -> list[dict[str, object]]:
    data = stream(seed, commits) if trace == "sim" else streaming_trace(seed, commits)
    results = []
    for target in TARGETS if trace == "sim" else (8 * MiB,):
        rules: dict[str, int] = {}
        base = run_baseline(data, target)
        ours = run_policy(data, target, fan_in, settle, rules)
        ratios = {k: (ours[k] / base[k] if base[k] else math.inf) for k in base}
        results.append({"target_mib": target // MiB, "baseline": base, "policy": ours, "ratio": ratios,
                        "rules": rules})
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--commits", type=int, default=COMMITS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--fan-in", type=int, default=DEFAULT_FAN_IN)
    ap.add_argument("--settle", type=float, default=DEFAULT_SETTLE_SECONDS)
    ap.add_argument("--trace", choices=("sim", "streaming"), default="sim",
                    help="this module's stream, or benchmarks.streaming's trace (8 MiB only)")
    args = ap.parse_args(argv)
    results = simulate(args.seed, args.commits, args.fan_in, args.settle, args.trace)
    head = {"trace": args.trace, "seed": args.seed, "commits": args.commits, "fan_in": args.fan_in, "settle_seconds": args.settle,
            "late_probability": LATE_PROBABILITY, "latency_commits": LATENCY_COMMITS, "results": results}
    if args.json:
        print(json.dumps(head, indent=2))
        return
    print(f"seed {args.seed}, {args.commits} commits, fan_in {args.fan_in}, settle {args.settle} s, "
          f"late p {LATE_PROBABILITY}, latency {LATENCY_COMMITS} commits")
    fmt: dict[str, Callable[[float], str]] = {"mean_live_files": "{:.1f}".format,
                                               "max_live_files": "{:.0f}".format,
                                               "write_amplification": "{:.2f}".format,
                                               "files_replaced": "{:.0f}".format, "final_files": "{:.0f}".format}
    for r in results:
        print(f"\ntarget {r['target_mib']} MiB{'':<12}{'policy':>10}{'baseline':>10}{'ratio':>8}")
        for k, f in fmt.items():
            print(f"  {k:<28}{f(r['policy'][k]):>10}{f(r['baseline'][k]):>10}{r['ratio'][k]:>8.2f}")
        print("  rules applied: " + ", ".join(f"{k} {v}" for k, v in sorted(r["rules"].items())))


if __name__ == "__main__":
    main()
