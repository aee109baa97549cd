"""The policy simulator on a live run's own writes, beside what the service did with them.

After ``benchmarks.streaming`` has run the service, the service table's writer commits (as they really
landed: their times, partitions and file sizes, read back by AutoAnalyze's ``table_writes``) are
replayed through ``domain.simulate`` with the tuning the service ran (its settings, read as the service
read them), what its merges wrote against what they read (``learned_output_model``), and the latency its
own merges had (``learn_timings``: from the write that prompted a merge
to its commit), judging each settle and cold-after moment on the listener's once-a-second passes, as late
on average as its timer merges were (``learn_timings``'s timer lag), and averaging the figures over four
phases of that clock (``simulate_on_clock``). Each merge plans when it started live (its start delay), not as it lands: a merge
does not take in the files written while it runs, and planning as it lands counted about 3 % fewer live
files than the service kept on seed 7 (docs/policy-history.md, "A merge plans when it starts"). The gap
between those figures and the live ones is what the simulator does not model; the blocking bin-pack is
replayed on the same writes too, beside the live bin-pack run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from pyiceberg.catalog import Catalog

from autooptimize.config import Settings, load_settings
from autooptimize.domain.replay_clock import CLOCK_PHASES, LISTENER_PASS_SECONDS, simulate_on_clock
from autooptimize.domain.simulate import simulate_baseline
from autooptimize.services.autotune import default_tuning, table_writes
from autooptimize.services.learned_timings import ASSUMED, learn_timings
from autooptimize.services.output_models import learned_output_model
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` replaced by ``env`` for the block (to read the settings as the service did)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` to 3 places; None when either is missing or ``b`` is 0."""
    return None if a is None or not b else round(a / b, 3)


def simulate_this_run(env: Mapping[str, str], catalog: Catalog, table_name: str, every: int,
                      live: Mapping[str, float | None]) -> dict[str, Any]:
    """The simulator's figures for the service table's own writes (``env``: the service's environment),
    with the live figures (``live``: ``live_files_mean`` and ``write_amplification``) and live / simulated."""
    with environment(env):
        settings: Settings = load_settings()
    table = catalog.load_table(table_name)
    writes, start_ms = table_writes(table)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, table_name)
        tuning = default_tuning(settings, row)
        learned = learn_timings(session, row.id, (writes, start_ms), tuning) if row is not None else ASSUMED
    latency, merges, start_delay, lag = learned.latency, learned.merges, learned.start_delay, learned.timer_lag
    model = learned_output_model(table)
    weight = model.share
    policy = simulate_on_clock(writes, tuning, latency, output_ratio=weight, start_delay=start_delay, timer_lag=lag,
                               file_overhead=model.file_overhead, pace=learned.pace)
    binpack = simulate_baseline(writes, tuning.target, every, weight, model.file_overhead)
    live_files, live_wa = live.get("live_files_mean"), live.get("write_amplification")
    return {"writes": len(writes), "tuning": tuning.as_dict(), "latency_seconds": round(latency, 3),
            "start_delay_seconds": None if start_delay is None else round(start_delay, 3),
            "latency_merges": merges, "size_pace": None if learned.pace is None else learned.pace.as_dict(),
            "output_ratio": round(weight, 4), "file_overhead": model.file_overhead,
            "timer_lag_seconds": round(lag, 3), "timer_lag_merges": learned.timer_merges,
            "listener_pass_seconds": LISTENER_PASS_SECONDS, "clock_phases": CLOCK_PHASES,
            "policy": {"mean_live_files": round(policy.mean_live_files, 2),
                       "write_amplification": round(policy.write_amplification, 3),
                       "end_files": policy.end_files, "actions": policy.actions},
            "binpack": {"mean_live_files": round(binpack.mean_live_files, 2),
                        "write_amplification": round(binpack.write_amplification, 3)},
            "live_over_simulated": {"mean_live_files": ratio(live_files, policy.mean_live_files),
                                    "write_amplification": ratio(live_wa, policy.write_amplification)}}


def report_lines(sim: Mapping[str, Any], live_binpack: Mapping[str, float | None] | None) -> list[str]:
    """The report's lines for :func:`simulate_this_run`'s figures."""
    p, b, r = sim["policy"], sim["binpack"], sim["live_over_simulated"]
    start = sim.get("start_delay_seconds")
    footer = sim.get("file_overhead")
    footers = "" if footer is None else f" less {footer} bytes for each file a merge removes"
    pace = sim.get("size_pace")
    paced = ("" if not pace else f", {100 * pace['seconds_per_mb']:.2f} s longer a run for each 100 MB over "
             f"{pace['reference_mb']:.1f} MB")
    lines = [f"simulator on this run's own {sim['writes']} writer commits (latency {sim['latency_seconds']} s, "
             f"{'planned as it lands' if start is None else f'planned {start} s after the write'}, "
             f"from {sim['latency_merges']} merges{paced}, timers judged {sim['timer_lag_seconds']} s late from "
             f"{sim['timer_lag_merges']} timer merges on the listener's {sim['listener_pass_seconds']:g} s passes, the mean "
             f"of {sim['clock_phases']} phases, output ratio {sim['output_ratio']}{footers}): mean live files "
             f"{p['mean_live_files']}, WA {p['write_amplification']}, {p['actions']} merges; live / simulated: "
             f"files {r['mean_live_files']}, WA {r['write_amplification']}"]
    if live_binpack:
        lines.append(f"simulated bin-pack on the same writes: mean live files {b['mean_live_files']}, WA "
                     f"{b['write_amplification']} (the live bin-pack run: {live_binpack.get('live_files_mean')}, "
                     f"{live_binpack.get('write_amplification')})")
    return lines
