"""Would averaging AutoAnalyze's prediction over small shifts of a history's write times centre it?

The DoD 2 live test (``tests/integration/test_autotune.py``) writes a history of 210 commits paced 0.25 s
apart, asks ``whatif --suggest`` for a tuning and replays the history live with it. Its realised write
amplification was 2.41–2.43 in six runs; the prediction, on each run's own history, 2.23–2.43. Replayed merge
by merge, the difference is one merge: whether a day's consolidating merge lands before that day's last late
rows or after them, which a commit landing a few tenths of a second later tips (docs/policy-history.md, "A
first output model from a calibration, and m03 with the margin").

This replays histories of the same shape, each with its own commit times (consecutive commits 0.12–0.42 s
apart, as the test's landed), with the test's suggested tuning (fan-in 4, cold after 5 s, gaps × 4) on the
listener's clock (the mean of its 4 phases, as the prediction), and the calibrated output model the test
measured. The baseline is one replay of each history, as ``whatif --suggest`` predicts today; each figure is
the mean over ``--copies`` copies of the history with every write moved by up to ± ``--shift`` seconds.
Printed: the mean, spread and range of predicted write amplification over the histories, and the spread as
a ratio of the baseline's. Exit 1 when a replay rewrote nothing.

    python -m benchmarks.replay_shift [--histories 12] [--copies 6] [--shift 0.1 --shift 0.2 --shift 0.4]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence

from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.replay_clock import simulate_on_clock
from autooptimize.domain.simulate import Write
from autooptimize.domain.time_spans import TimePartition

COMMITS, PER_DAY, PACE = 210, 50, 0.25  # the DoD 2 history's shape
BYTES_PER_ROW = 37  # its files: 10–90 KB for 270–2,400 rows
TUNING = PolicyTuning(8 << 20, 4, cold_after_seconds=5.0, cold_gap_factor=4.0, price=0)
# the calibration the test measured (2026-12-01) and the assumed timings of a table with no merges
MODEL = {"output_ratio": 0.994, "file_overhead": 988, "first_ratio": 0.895}
LATENCY, START_DELAY, TIMER_LAG = 2.0, 1.7, 0.85


def history(seed: int) -> list[Write]:
    """The test's commits (its rows, seed 25) landing at times drawn from ``seed``."""
    rows, times = random.Random(25), random.Random(seed)
    out: list[Write] = []
    at = 0.0
    for i in range(COMMITS):
        day = i // PER_DAY
        files = [(TimePartition(0, day, f"d{day}"), rows.randint(800, 2400) * BYTES_PER_ROW)]
        if i >= PER_DAY and rows.random() < 0.3:  # late rows into the day before (listed first, as the table's)
            files.insert(0, (TimePartition(0, day - 1, f"d{day - 1}"), rows.randint(200, 600) * BYTES_PER_ROW))
        at = max(i * PACE, at + times.uniform(0.12, 0.42)) if i else 0.0
        out.append(Write(at, tuple(files)))
    return out


def shifted(writes: Sequence[Write], seed: int, shift: float) -> list[Write]:
    """``writes`` with every time moved by up to ± ``shift`` seconds, kept in order."""
    draw = random.Random(seed)
    times = sorted(max(0.0, w.at + draw.uniform(-shift, shift)) for w in writes)
    return [Write(t, w.files) for t, w in zip(times, writes, strict=True)]


def predict(writes: Sequence[Write]) -> tuple[float, int]:
    f = simulate_on_clock(writes, TUNING, LATENCY, timer_lag=TIMER_LAG, start_delay=START_DELAY, **MODEL)
    return f.write_amplification, f.bytes_rewritten


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--histories", type=int, default=12)
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--shift", type=float, action="append", help="seconds (repeatable; default 0.1 0.2 0.4)")
    args = parser.parse_args(argv)
    shifts = args.shift or [0.1, 0.2, 0.4]
    histories = [history(seed) for seed in range(args.histories)]
    base = [predict(h) for h in histories]
    if any(rewritten <= 0 for _, rewritten in base):
        print("a replay rewrote nothing: nothing was measured", file=sys.stderr)
        return 1
    was = [wa for wa, _ in base]
    spread = statistics.pstdev(was)
    print(f"{args.histories} histories, one replay each (baseline): WA mean {statistics.mean(was):.3f}, "
          f"sd {spread:.3f}, range {min(was):.3f}–{max(was):.3f}")
    for shift in shifts:
        means = [statistics.mean(predict(shifted(h, k, shift))[0] for k in range(args.copies)) for h in histories]
        sd = statistics.pstdev(means)
        print(f"mean of {args.copies} copies shifted ±{shift:g} s: WA mean {statistics.mean(means):.3f}, sd {sd:.3f}, "
              f"range {min(means):.3f}–{max(means):.3f}; sd / baseline's {sd / spread if spread else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
