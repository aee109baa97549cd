"""``benchmarks.streaming`` run several times: the service's figures of each run, and their mean, beside one
blocking bin-pack run of the same trace.

    python -m benchmarks.streaming_repeat --runs 3 [every option of benchmarks.streaming]

One live run cannot decide the live-ingest goal: on seed 7 at the same settings, mean live files differ
by 3-6 % from run to run and write amplification by 0.03-0.05 (docs/policy-history.md, "The
run-to-run spread"). The writer's trace is seeded and the bin-pack is blocking, so its figures repeat; the
service's depend on when its merges land. Each run has a database, AO_HOME, Redis db contents and
table of its own, as a single run of ``benchmarks.streaming`` does; the bin-pack runs once, after the
first service run.

Printed: each run's mean live files and write amplification as ratios of the bin-pack's, and the mean
of the runs with their range; the goals are judged on the mean, and the count of runs that met each is
shown beside. Exit code 1 when a run's content differs from what was written, or a run ingested or
rewrote nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from autooptimize.domain.goals import WRITE_AMPLIFICATION_GOAL
from benchmarks.streaming import measure, on_sigterm_unwind, parse_args
from benchmarks.streaming_predict import ratio


def _runs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3, help="service runs (default 3); the bin-pack runs once")


def did_work(service: dict[str, Any]) -> bool:
    """The run ingested rows and rewrote bytes (a run that did neither proves nothing)."""
    return bool(service.get("rows_expected")) and bool(service.get("bytes_rewritten"))


def summarise(runs: Sequence[dict[str, Any]], baseline: dict[str, Any]) -> dict[str, Any]:
    """Per run and mean: live files / the bin-pack's, write amplification; the goals on the mean and the
    number of runs that met each."""
    base_files = baseline["live_files_mean"]
    rows = [{"live_files_mean": r["live_files_mean"], "files_ratio": ratio(r["live_files_mean"], base_files),
             "write_amplification": r["write_amplification"], "aborted_or_failed": r["aborted_or_failed"],
             "content_equal": r["content_equal"]} for r in runs]
    ratios = [row["files_ratio"] for row in rows]
    was = [row["write_amplification"] for row in rows]
    mean_files, mean_wa = statistics.fmean(ratios), statistics.fmean(was)
    return {
        "runs": rows, "baseline": {"live_files_mean": base_files, "write_amplification": baseline["write_amplification"]},
        "mean": {"files_ratio": round(mean_files, 4), "write_amplification": round(mean_wa, 4)},
        "range": {"files_ratio": [min(ratios), max(ratios)], "write_amplification": [min(was), max(was)]},
        "goals_on_mean": {"mean live files ≤ baseline": mean_files <= 1.0,
                          "write amplification ≤ 1.5": mean_wa <= WRITE_AMPLIFICATION_GOAL,
                          "zero aborted actions": all(row["aborted_or_failed"] == 0 for row in rows),
                          "content equal": all(row["content_equal"] for row in rows) and baseline["content_equal"]},
        "runs_meeting": {"mean live files ≤ baseline": sum(x <= 1.0 for x in ratios),
                         "write amplification ≤ 1.5": sum(w <= WRITE_AMPLIFICATION_GOAL for w in was),
                         "both": sum(x <= 1.0 and w <= WRITE_AMPLIFICATION_GOAL for x, w in zip(ratios, was, strict=True))},
    }


def report(summary: dict[str, Any]) -> str:
    b = summary["baseline"]
    lines = [f"bin-pack (one run): mean live files {b['live_files_mean']}, write amplification {b['write_amplification']}"]
    for i, row in enumerate(summary["runs"], 1):
        lines.append(f"service run {i}: mean live files {row['live_files_mean']} ({row['files_ratio']:.3f}× the "
                     f"bin-pack's), write amplification {row['write_amplification']}, aborted "
                     f"{row['aborted_or_failed']}, content {'equal' if row['content_equal'] else 'DIFFERS'}")
    m, r, n = summary["mean"], summary["range"], len(summary["runs"])
    lines.append(f"mean of {n}: {m['files_ratio']:.4f}× the bin-pack's files (range {r['files_ratio'][0]:.3f}-"
                 f"{r['files_ratio'][1]:.3f}), write amplification {m['write_amplification']:.4f} (range "
                 f"{r['write_amplification'][0]}-{r['write_amplification'][1]})")
    met = summary["runs_meeting"]
    lines.append("goals on the mean: " + "; ".join(f"{k}: {'met' if v else 'MISSED'}"
                                                    for k, v in summary["goals_on_mean"].items()))
    lines.append(f"runs meeting: files {met['mean live files ≤ baseline']}/{n}, write amplification "
                 f"{met['write amplification ≤ 1.5']}/{n}, both {met['both']}/{n}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv, prog="python -m benchmarks.streaming_repeat", extra=_runs_argument)
    if args.runs < 1 or args.no_baseline:
        print("--runs must be ≥ 1, and the bin-pack is needed (no --no-baseline)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    on_sigterm_unwind()
    runs, baseline = [], None
    for i in range(args.runs):
        args.no_baseline = baseline is not None
        result = measure(args)
        service = result["service"]
        runs.append(service)
        baseline = baseline or result["baseline"]
        beside = (result.get("simulated") or {}).get("live_over_simulated")
        print(f"run {i + 1}/{args.runs}: mean live files {service['live_files_mean']} (the bin-pack's "
              f"{baseline['live_files_mean']}), write amplification {service['write_amplification']}; "
              f"live / the simulator on its own writes: {beside}", flush=True)
    assert baseline is not None
    summary = summarise(runs, baseline)
    print(report(summary))
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    ok = all(did_work(r) for r in runs) and summary["goals_on_mean"]["content equal"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
