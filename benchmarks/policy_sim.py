"""The merge policy against Iceberg's periodic bin-pack over the trace family: pure, seeded, no I/O.

    python -m benchmarks.policy_sim [--member NAME ...] [--json] [--fan-in N] [--settle S] [--cold-after S]
                                    [--target SIZE] [--every N] [--trace family|streaming] [--suggest]
                                    [--quiet-merge] [--cold-gap-factor K] [--commits N] [--no-late-horizon]
                                    [--price K] [--latency S] [--start-delay S] [--variant K]
                                    [--seconds-per-mb S --reference-mb MB] [--one-file-per-partition]

For each member of :data:`benchmarks.trace_family.FAMILY` (or ``--trace streaming``: the trace of
``benchmarks.streaming`` at 8 and 128 MiB), the same writes are replayed twice by
:mod:`autooptimize.domain.simulate`:

A member's writes are its files as the live benchmark's writer puts them on the table: pyiceberg's append
cuts a partition's rows into data files of 512 MiB of Arrow (about 284 MB on disk), so m03's 78 family
files are 147 data files, m11's 556 are 675 (:func:`benchmarks.trace.writer_cut`); the others are cut
nowhere. ``--one-file-per-partition`` replays the family's own files instead.

* **bin-pack** (the baseline): a blocking Iceberg bin-pack of every partition after every ``--every``
  writes (20, as ``benchmarks.streaming``) and once more after the last; its live files are counted
  right after each write, before the bin-pack that follows it, as ``benchmarks.streaming`` counts;
* **policy**: the live-partition policy with the shipped defaults (or the tuning given), the service's
  settle and cold timers, merges landing ``--latency`` seconds (2 s) after they are decided, planned as
  they land or, with ``--start-delay``, that long after the decision (as the service's action plans when
  it starts; ``--latency 0.35 --start-delay 0.18`` is what the live runs of ``benchmarks.streaming`` showed
  in 2026-11). With ``--seconds-per-mb`` a merge runs that much longer for each MB it reads over
  ``--reference-mb`` (and as much shorter under), as AutoAnalyze's learned pace
  (:mod:`autooptimize.domain.pace`).

Printed per member, policy beside bin-pack with the ratio: mean live files, files replaced, bytes
rewritten, write amplification, files at the end and excess MSE at the end (MiB²), and whether each goal
of issue 25 holds (WA ≤ 1.5, replaced ≤ 0.5×, mean live ≤ 1.05×, end files and excess MSE within 10 %
after cold). ``floor`` is the least any policy can replace to reach the bin-pack's end layout: writer
files under ¾ of the target, less the bin-pack's files at the end, over the bin-pack's files replaced.
``--suggest`` adds, per member, the tuning AutoAnalyze suggests from the member's own writes
(:func:`~autooptimize.domain.suggest.suggest_tuning`: fan-in, cold-after, leave-alone, quiet merging)
with its figures, the goals each tuning holds, and its summed shortfall from them
(:func:`~autooptimize.domain.suggest.shortfall`): per-table tuning must hold at least as many goals as
the defaults on every member (``WORSE`` marks a member where it does not).
Exit code 1 when the run did no work (a member wrote no bytes, or neither side merged anything).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from autooptimize.domain.output_model import SHARE_BOUNDS
from autooptimize.domain.pace import SizePace
from autooptimize.domain.policy import (
    DEFAULT_COLD_AFTER_SECONDS,
    DEFAULT_COLD_GAP_FACTOR,
    DEFAULT_FAN_IN,
    DEFAULT_QUIET_MERGE,
    DEFAULT_SETTLE_SECONDS,
    PolicyTuning,
)
from autooptimize.domain.priced import DEFAULT_PRICE
from autooptimize.domain.remainder import DEFAULT_COLD_ABSORB
from autooptimize.domain.replay_clock import LISTENER_PASS_SECONDS, simulate_on_clock
from autooptimize.domain.simulate import (
    BASELINE_EVERY,
    LATENCY_SECONDS,
    Figures,
    Write,
    simulate_baseline,
    simulate_policy,
)
from autooptimize.domain.sizes import parse_size
from autooptimize.domain.suggest import MAX_LIVE_FILES_BIAS, candidate_tunings, shortfall, suggest_tuning
from benchmarks.trace_family import FAMILY, HOUR_SECONDS, Member, make_commits, variant

MiB = 1 << 20
GOALS = {"write_amplification": 1.5, "files_replaced": 0.5, "mean_live_files": 1.05, "end_files": 1.10,
         "end_excess_mse_mib2": 1.10}


def family_writes(m: Member, one_file_per_partition: bool = False) -> list[Write]:
    """The member's commits as the live benchmark's writer puts them on the table: each family file cut into
    the data files pyiceberg's append makes of it (:func:`benchmarks.trace.writer_cut`: files of about
    2.5 M rows, 284 MB; only m03 and m11 have larger ones). ``one_file_per_partition``: the family's own
    files, one per partition a commit touches, as a writer that never splits would put them."""
    commits = make_commits(m)
    if one_file_per_partition:
        return [Write(c.at, c.files) for c in commits]
    from benchmarks.trace import (
        PYICEBERG_FILE_ARROW_BYTES,
        STREAMING_SEED,
        arrow_bytes_per_row,
        bytes_per_row,
        family_trace,
        writer_cut,
    )

    per_row = bytes_per_row(STREAMING_SEED)
    rows_per_file = max(1, int(PYICEBERG_FILE_ARROW_BYTES // arrow_bytes_per_row(STREAMING_SEED)))
    out = []
    for c, t in zip(commits, family_trace(m, STREAMING_SEED), strict=True):
        cut = writer_cut(t.files, rows_per_file)
        if len(cut) == len(c.files):  # nothing cut: the family's own sizes, exactly
            out.append(Write(c.at, c.files))
            continue
        base = t.files[0].part - c.files[0][0] if c.files else 0
        out.append(Write(c.at, tuple((part - base, max(1, round(rows * per_row))) for part, rows in cut)))
    return out


def streaming_writes(seed: int = 7, commits: int = 320) -> list[Write]:
    """benchmarks.streaming's trace with ``seed`` (``commits`` at 1.6/s, 60 per hour) at nominal times."""
    from benchmarks.trace import TraceShape, make_trace

    writes = []
    for c in make_trace(TraceShape(commits=commits, seed=seed)):
        per: dict[int, int] = {}
        for f in c.files:
            per[f.part] = per.get(f.part, 0) + f.drawn_bytes
        writes.append(Write(c.index / 1.6, tuple(sorted(per.items()))))
    return writes


def streaming_members() -> list[tuple[str, int, list[Write]]]:
    """benchmarks.streaming's default trace (seed 7, 320 commits) at 8 and 128 MiB."""
    writes = streaming_writes(7)
    return [("streaming-8M", 8 * MiB, writes), ("streaming-128M", 128 * MiB, writes)]


def floor_ratio(writes: Sequence[Write], target: int, base: Figures) -> float:
    small = sum(1 for w in writes for _, b in w.files if b < target * 3 // 4)
    return max(0, small - base.end_files) / base.files_replaced if base.files_replaced else 0.0


def compare(name: str, writes: Sequence[Write], tuning: PolicyTuning, every: int,
            ours: Figures | None = None, latency: float = LATENCY_SECONDS,
            start_delay: float | None = None, timer_lag: float = 0.0, clock: bool = False,
            output_ratio: float = 1.0, file_overhead: int | None = None,
            pace: SizePace | None = None) -> dict[str, Any]:
    base = simulate_baseline(writes, tuning.target, every, output_ratio, file_overhead)
    if ours is None:
        replay = {"start_delay": start_delay, "timer_lag": timer_lag, "output_ratio": output_ratio,
                  "file_overhead": file_overhead, "pace": pace}
        ours = (simulate_on_clock(writes, tuning, latency, **replay) if clock
                else simulate_policy(writes, tuning, latency, **replay))
    b, p = base.as_dict(), ours.as_dict()
    ratio = {k: (p[k] / b[k] if b[k] else (1.0 if not p[k] else float("inf"))) for k in b if k != "rules"}
    ok = {
        "write_amplification": p["write_amplification"] <= GOALS["write_amplification"],
        "files_replaced": ratio["files_replaced"] <= GOALS["files_replaced"],
        "mean_live_files": ratio["mean_live_files"] <= GOALS["mean_live_files"],
        "end_files": p["end_files"] <= b["end_files"] * GOALS["end_files"],
        # 1 MiB² of slack: the bin-pack's own figure is often 0 and 10 % of 0 is nothing
        "end_excess_mse_mib2": p["end_excess_mse_mib2"] <= b["end_excess_mse_mib2"] * GOALS["end_excess_mse_mib2"] + 1,
    }
    return {"member": name, "tuning": tuning.as_dict(), "baseline": b, "policy": p, "ratio": ratio, "ok": ok,
            "floor_replaced": floor_ratio(writes, tuning.target, base), "rules": dict(ours.rules),
            "shortfall": shortfall(ours, base)}


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = [("mean_live_files", "live", "{:.1f}"), ("files_replaced", "replaced", "{:.0f}"),
            ("bytes_rewritten", "rewritten MB", None), ("write_amplification", "WA", "{:.2f}"),
            ("end_files", "end files", "{:.0f}"), ("end_excess_mse_mib2", "end exMSE", "{:.0f}")]
    head = f"{'member':<28}" + "".join(f"{label:>22}" for _, label, _ in cols) + "  floor  goals"
    print(head)
    print(f"{'':<28}" + "".join(f"{'policy/binpack (x)':>22}" for _ in cols))
    for r in rows:
        cells = []
        for key, _, fmt in cols:
            p, b = r["policy"][key], r["baseline"][key]
            if fmt is None:
                text = f"{p / 1e6:.0f}/{b / 1e6:.0f}"
            else:
                text = f"{fmt.format(p)}/{fmt.format(b)}"
            cells.append(f"{text} ({r['ratio'][key]:.2f})")
        failed = [k for k, v in r["ok"].items() if not v]
        goals = "ok" if not failed else "MISS " + ",".join(
            {"write_amplification": "WA", "files_replaced": "replaced", "mean_live_files": "live",
             "end_files": "end", "end_excess_mse_mib2": "exMSE"}[k] for k in failed)
        print(f"{r['member']:<28}" + "".join(f"{c:>22}" for c in cells) + f"  {r['floor_replaced']:.2f}   {goals}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trace", choices=("family", "streaming"), default="family")
    ap.add_argument("--member", action="append", help="a member name or prefix (repeatable); default all")
    ap.add_argument("--fan-in", type=int, default=DEFAULT_FAN_IN)
    ap.add_argument("--settle", type=float, default=DEFAULT_SETTLE_SECONDS)
    ap.add_argument("--cold-after", type=float, default=DEFAULT_COLD_AFTER_SECONDS)
    ap.add_argument("--cold-gap-factor", type=float, default=DEFAULT_COLD_GAP_FACTOR,
                    help="a partition is cold after this many times its recent gaps between writes (0: off)")
    ap.add_argument("--target", help="override every member's target (e.g. 128MiB)")
    ap.add_argument("--every", type=int, default=BASELINE_EVERY, help="bin-pack after this many writes")
    ap.add_argument("--commits", type=int, help="keep each member's first N commits (as streaming --member)")
    ap.add_argument("--variant", type=int, default=0,
                    help="each member's commits drawn from another seed (as streaming --variant; 0: the member)")
    ap.add_argument("--quiet-merge", action=argparse.BooleanOptionalAction, default=DEFAULT_QUIET_MERGE,
                    help="merge quiet partitions (no write for the settle time) before they go cold")
    ap.add_argument("--late-horizon", action=argparse.BooleanOptionalAction, default=True,
                    help="finish a partition past the table's late horizon at once (the default, as the service)")
    ap.add_argument("--cold-absorb", action=argparse.BooleanOptionalAction, default=DEFAULT_COLD_ABSORB,
                    help="the cold finish gives a remainder under ¾ of the target a nearly full file to join "
                         "(autooptimize.domain.remainder; off by default, as the service)")
    ap.add_argument("--price", type=int, default=DEFAULT_PRICE,
                    help=f"the priced live rule's price (default {DEFAULT_PRICE}, the service's; 0: the tiers)")
    ap.add_argument("--latency", type=float, default=LATENCY_SECONDS,
                    help=f"seconds from a merge's decision to its commit (default {LATENCY_SECONDS:g})")
    ap.add_argument("--start-delay", type=float,
                    help="seconds from a merge's decision to its plan (default: it plans as it lands)")
    ap.add_argument("--seconds-per-mb", type=float,
                    help="with --start-delay: a merge runs this much longer per MB it reads over --reference-mb")
    ap.add_argument("--reference-mb", type=float, default=0.0,
                    help="the MB a merge reads that --latency is measured at (with --seconds-per-mb; default 0)")
    ap.add_argument("--timer-lag", type=float, default=0.0,
                    help="seconds from a partition's settle or cold-after moment to its judgement (default 0: at "
                         "once; the service's listener judges them 0.35-1.8 s late)")
    ap.add_argument("--clock", action="store_true",
                    help=f"judge timers on the service listener's passes ({LISTENER_PASS_SECONDS:g} s apart; a "
                         "partition just left alone waits the settle time), the mean over the clock's phases, "
                         "as AutoAnalyze predicts")
    ap.add_argument("--output-ratio", type=float, default=1.0,
                    help="what a merge writes per byte it reads (default 1: the same; the service's merges of "
                         "benchmarks.streaming write 0.98-0.99, as AutoAnalyze fits it); both runs")
    ap.add_argument("--file-overhead", type=int,
                    help="with --output-ratio: bytes a merge's output weighs less per file it removes (a Parquet "
                         "footer; about 50000 in benchmarks.streaming)")
    ap.add_argument("--one-file-per-partition", action="store_true",
                    help="the family's own files, one per partition a commit touches, not cut as the live "
                         "benchmark's writer (pyiceberg's append) cuts them; only m03 and m11 differ")
    ap.add_argument("--suggest", action="store_true", help="also the tuning suggested per member (AutoAnalyze)")
    ap.add_argument("--live-files-bias", type=float, default=1.0,
                    help="with --suggest: judge the file goal on the replay's live files times this, the margin "
                         "a table's own check asks (domain.suggest.live_files_bias; 1 to 2, default 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not 1.0 <= args.live_files_bias <= MAX_LIVE_FILES_BIAS:
        ap.error(f"--live-files-bias must be within [1, {MAX_LIVE_FILES_BIAS:g}], got {args.live_files_bias}")
    if args.price < 0:
        ap.error(f"--price must be a whole number ≥ 0 (0: the tiers), got {args.price}")
    if not args.latency >= 0:
        ap.error(f"--latency must be seconds ≥ 0, got {args.latency}")
    if args.start_delay is not None and not 0 <= args.start_delay <= args.latency:
        ap.error(f"--start-delay must be seconds within [0, --latency ({args.latency:g})], got {args.start_delay}")
    pace = None
    if args.seconds_per_mb is not None:
        if args.start_delay is None:
            ap.error("--seconds-per-mb needs --start-delay: a merge's run is known once it has planned")
        try:
            pace = SizePace(args.seconds_per_mb, args.reference_mb)
        except ValueError as e:
            ap.error(f"--seconds-per-mb/--reference-mb: {e}")
    if not args.timer_lag >= 0:
        ap.error(f"--timer-lag must be seconds ≥ 0, got {args.timer_lag}")
    if not SHARE_BOUNDS[0] <= args.output_ratio <= SHARE_BOUNDS[1]:  # what AutoAnalyze believes of a fit
        ap.error(f"--output-ratio must be within [{SHARE_BOUNDS[0]:g}, {SHARE_BOUNDS[1]:g}], got {args.output_ratio}")
    if args.file_overhead is not None and args.file_overhead < 0:
        ap.error(f"--file-overhead must be bytes ≥ 0, got {args.file_overhead}")
    if args.trace == "family":
        members = [m for m in FAMILY if not args.member or any(m.name.startswith(x) for x in args.member)]
        if not members:
            ap.error(f"no member matches {args.member}; members: {', '.join(m.name for m in FAMILY)}")
        try:
            members = [variant(m, args.variant) for m in members]
        except ValueError as e:
            ap.error(f"--variant: {e}")
        work = [(m.name, m.target, family_writes(m, args.one_file_per_partition)[:args.commits]) for m in members]
    else:
        work = streaming_members()
    started = time.monotonic()
    rows = []
    suggested = []
    for name, target, writes in work:
        target = parse_size(args.target) if args.target else target
        tuning = PolicyTuning(target, args.fan_in, args.settle, args.cold_after, quiet_merge=args.quiet_merge,
                              cold_gap_factor=args.cold_gap_factor, late_horizon=args.late_horizon, price=args.price,
                              cold_absorb=args.cold_absorb)
        rows.append(compare(name, writes, tuning, args.every, latency=args.latency, start_delay=args.start_delay,
                            timer_lag=args.timer_lag, clock=args.clock, output_ratio=args.output_ratio,
                            file_overhead=args.file_overhead, pace=pace))
        if args.suggest:
            leave = sorted({0, min(target // 8, 1 << 20)})
            s = suggest_tuning(writes, tuning, candidate_tunings(tuning, leave_alone=leave), args.every,
                               args.latency, start_delay=args.start_delay, timer_lag=args.timer_lag,
                               timer_every=LISTENER_PASS_SECONDS if args.clock else 0.0,
                               output_ratio=args.output_ratio, file_overhead=args.file_overhead, pace=pace,
                               live_files_bias=args.live_files_bias)
            row = compare(name, writes, s.tuning, args.every, s.predicted, output_ratio=args.output_ratio,
                          file_overhead=args.file_overhead)
            row["member"] = f"  {name[:3]} suggested"
            suggested.append(row)
    if args.json:
        print(json.dumps({"hour_seconds": HOUR_SECONDS, "every": args.every, "latency": args.latency,
                          "start_delay": args.start_delay, "timer_lag": args.timer_lag, "clock": args.clock,
                          "output_ratio": args.output_ratio, "file_overhead": args.file_overhead,
                          "pace": pace.as_dict() if pace is not None else None,
                          "rows": rows,
                          "suggested": suggested},
                         indent=2))
    else:
        print(f"policy ({f'price {args.price}' if args.price else 'the tiers'}, fan_in {args.fan_in}, "
              f"settle {args.settle:g} s, cold after {args.cold_after:g} s "
              f"or {args.cold_gap_factor:g} × a partition's recent gaps, "
              f"quiet merge {'on' if args.quiet_merge else 'off'}{', cold absorb on' if args.cold_absorb else ''}"
              f"{'' if args.late_horizon else ', no late-horizon finish'}; merges land {args.latency:g} s after "
              f"they are decided"
              f"{'' if args.start_delay is None else f', planned {args.start_delay:g} s after'}"
              f"{'' if pace is None else f', {pace.seconds_per_mb:g} s longer per MB over {pace.reference_mb:g}'}"
              f"{f'; timers judged {args.timer_lag:g} s late' if args.timer_lag else ''}"
              f"{'; on the listener clock, the mean of its phases' if args.clock else ''}) "
              f"beside a blocking bin-pack every {args.every} writes; one partition-hour = {HOUR_SECONDS:g} s")
        print_table(rows)
        held = sum(all(r["ok"].values()) for r in rows)
        print(f"\nall goals held on {held}/{len(rows)} members; "
              f"{time.monotonic() - started:.1f} s")
        if suggested:
            print("\nper-table tuning (AutoAnalyze), from each member's own writes:")
            print_table(suggested)
            for d, s in zip(rows, suggested, strict=True):
                t = s["tuning"]
                held_d, held_s = sum(d["ok"].values()), sum(s["ok"].values())
                print(f"{d['member']:<28} {'price ' + str(t['price']) + ', ' if t.get('price') else ''}fan-in {t['fan_in']:>2}, cold after {t['cold_after_seconds']:>4.0f} s, "
                      f"gaps × {t['cold_gap_factor']:g}, leave alone below {t['leave_alone_below']:>8}, quiet merge "
                      f"{'on ' if t['quiet_merge'] else 'off'}{', cold absorb' if t.get('cold_absorb') else ''}: goals held {held_d} -> {held_s} of 5, "
                      f"shortfall {d['shortfall']:.2f} -> {s['shortfall']:.2f}" + ("" if held_s >= held_d else "  WORSE"))
    # a member may need no merge (files over the target), but the run as a whole must have merged
    did_work = (all(r["policy"]["bytes_written"] for r in rows) and any(r["policy"]["bytes_rewritten"] for r in rows)
                and any(r["baseline"]["bytes_rewritten"] for r in rows))
    return 0 if did_work else 1


if __name__ == "__main__":
    sys.exit(main())
