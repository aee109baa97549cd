"""AutoAnalyze's replay on the service listener's clock: the mean of :func:`~autooptimize.domain.simulate.simulate_policy`
over the phases of that clock.

The listener hands settled and cold partitions over on passes about a second apart, and judges a partition
it has just left alone as written to again only once that verdict is the settle time old. Which late write
comes before the pass that would have finished a small partition decides whether that partition is read
whole once more, so one replay is one path of several; the mean over the clock's phases is the prediction
(docs/policy-history.md, "The listener's clock in the replay").

Pure: the standard library and :mod:`autooptimize.domain` only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import LATENCY_SECONDS, Figures, Write, simulate_policy

__all__ = ["CLOCK_PHASES", "LISTENER_PASS_SECONDS", "mean_figures", "simulate_on_clock", "simulate_phases"]

#: The service's listener hands settled and cold partitions over on its passes, at most this many seconds
#: apart (``scheduler.listener.SettledRecheck``): the clock :func:`simulate_on_clock` judges timers on.
LISTENER_PASS_SECONDS = 1.0
#: The phases of that clock :func:`simulate_on_clock` averages a prediction over.
CLOCK_PHASES = 4


def mean_figures(runs: Sequence[Figures]) -> Figures:
    """The mean of ``runs`` (replays of the same writes), counts rounded to whole files, bytes and actions."""
    if not runs:
        raise ValueError("mean_figures needs at least one run")
    n = len(runs)

    def mean(get: Callable[[Figures], float]) -> float:
        return sum(map(get, runs)) / n
    rules: dict[str, int] = {}
    for f in runs:
        for rule, count in f.rules:
            rules[rule] = rules.get(rule, 0) + count
    return Figures(mean(lambda f: f.mean_live_files), max(f.max_live_files for f in runs),
                   round(mean(lambda f: f.files_replaced)), round(mean(lambda f: f.bytes_rewritten)),
                   round(mean(lambda f: f.bytes_written)), round(mean(lambda f: f.end_files)),
                   mean(lambda f: f.end_excess_mse), round(mean(lambda f: f.actions)),
                   tuple(sorted((rule, round(count / n)) for rule, count in rules.items())))


def simulate_phases(writes: Sequence[Write], tuning: PolicyTuning, latency: float = LATENCY_SECONDS, *,
                    timer_lag: float = 0.0, phases: int = CLOCK_PHASES, every: float = LISTENER_PASS_SECONDS,
                    **kwargs: Any) -> list[Figures]:
    """:func:`simulate_policy` with every settle and cold-after moment judged on the listener's passes
    (``every`` seconds apart; ``timer_every``), once for each of ``phases`` evenly spaced phases of that
    clock (each a history the same writes could have had); ``kwargs`` as :func:`simulate_policy`'s."""
    if not isinstance(phases, int) or phases < 1:
        raise ValueError(f"phases must be an integer ≥ 1, got {phases!r}")
    if not every > 0:
        raise ValueError(f"every must be seconds > 0, got {every!r}")
    return [simulate_policy(writes, tuning, latency, timer_lag=timer_lag, timer_every=every,
                            timer_phase=k * every / phases, **kwargs) for k in range(phases)]


def simulate_on_clock(writes: Sequence[Write], tuning: PolicyTuning, latency: float = LATENCY_SECONDS, *,
                      timer_lag: float = 0.0, phases: int = CLOCK_PHASES, every: float = LISTENER_PASS_SECONDS,
                      **kwargs: Any) -> Figures:
    """The mean of :func:`simulate_phases` (the same arguments)."""
    return mean_figures(simulate_phases(writes, tuning, latency, timer_lag=timer_lag, phases=phases, every=every,
                                        **kwargs))
