"""AutoAnalyze's search: replay a table's writes (:mod:`autooptimize.domain.simulate`) with candidate
tunings and pick the one that rewrites the fewest bytes while it keeps the file goal.

Pure: the standard library and :mod:`autooptimize.domain` only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autooptimize.domain.goals import (
    LIVE_FILES_GOAL,
    WRITE_AMPLIFICATION_GOAL,
    end_layout_holds,
    end_shortfall,
)
from autooptimize.domain.pace import SizePace
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.replay_clock import mean_figures, simulate_phases
from autooptimize.domain.simulate import (
    BASELINE_EVERY,
    LATENCY_SECONDS,
    Figures,
    Write,
    simulate_baseline,
    simulate_policy,
)

__all__ = ["ABSORB_TRIED", "END_CHECKS", "IN_FORCE_COMMITS", "MARGIN_CHECKS", "MAX_LIVE_FILES_BIAS",
           "MIN_END_PARTITIONS", "SUGGEST_COLD_AFTER", "SUGGEST_FAN_INS", "SUGGEST_PRICES", "SWITCH_SAVING", "Suggestion",
           "candidate_tunings", "end_check_of", "end_in_force", "live_check_of", "live_error", "live_files_bias",
           "live_files_margin", "shortfall", "suggest_tuning"]

#: The fan-ins and cold-after times ``suggest_tuning`` tries by default (the target stays the table's).
SUGGEST_FAN_INS = (4, 6, 8, 12, 16, 24, 32)
SUGGEST_COLD_AFTER = (30.0, 60.0, 120.0, 300.0)
#: The prices of the priced live rule ``suggest_tuning`` tries (autooptimize.domain.priced; each with the
#: default's fan-in for the partitions the rule leaves to the tiers, and quiet merging off); the table's
#: own price is tried beside them (candidate_tunings).
SUGGEST_PRICES = (16, 20, 24, 32, 48)
#: The candidates short of the end layout that ``suggest_tuning`` tries again with ``cold_absorb`` on.
ABSORB_TRIED = 8
#: The least share of its bytes rewritten another tuning must save to replace a tuning in force that keeps the
#: goals, as it must on every phase of the listener's clock. Two live runs of one tuning on m01 differed by
#: 0.6 % in WA; a suggestion predicted to save 0.05 % on m07 (the loop's second step) is noise, and one
#: predicted to save 3.6 % on the mean of the phases but not on one of them saved nothing live (m07, session 53).
SWITCH_SAVING = 0.02
#: The most a table's own check tightens the file goal (:func:`live_files_bias`): a table that kept more
#: than twice the live files its replay said has a replay that does not describe it, and no margin mends that.
MAX_LIVE_FILES_BIAS = 2.0


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The tuning a history suggests, what it predicts, and what the baseline and the defaults did."""

    tuning: PolicyTuning
    predicted: Figures
    baseline: Figures
    defaults: Figures
    meets_goal: bool  # mean live files within LIVE_FILES_GOAL × the bin-pack's; end files and excess within 10 %
    tried: int
    live_files_bias: float = 1.0  # the goal was judged on the predicted live files times this
    end_in_force: float | None = None  # the tuning in force's end layout was judged on this shortfall, not its replay
    live_in_force: float | None = None  # the tuning in force's live files were judged on its replay's times this
    passed_over: Mapping[str, object] | None = None  # the better tuning the tuning in force was kept over, and why

    def as_dict(self) -> dict[str, object]:
        return {"tuning": self.tuning.as_dict(), "predicted": self.predicted.as_dict(),
                "baseline": self.baseline.as_dict(), "defaults": self.defaults.as_dict(),
                "meets_goal": self.meets_goal, "tried": self.tried, "live_files_bias": self.live_files_bias,
                "end_in_force": self.end_in_force, "live_in_force": self.live_in_force,
                "passed_over": dict(self.passed_over) if self.passed_over is not None else None}


def live_files_bias(check: Mapping[str, object] | None) -> float:
    """The margin a table's own record asks of its next suggestion: 1 + how much more mean live files the
    table kept than the replay of the same commits predicted (``check["relative_error"]["mean_live_files"]``,
    :func:`autooptimize.services.autotune.check_prediction`), at most :data:`MAX_LIVE_FILES_BIAS`. 1 without a
    check; where the table kept as few files as predicted or fewer (the margin only tightens the goal); and
    where nothing merged the table in the checked time (``check["realised"]["bytes_rewritten"]`` 0: the
    service was stopped, or the table paused or out of budget, which says nothing of the replay).
    On m03 a suggestion predicted at 0.95× the bin-pack's files kept 1.06× live, where the replay of its own
    commits said 0.99×."""
    value = live_error(check)
    return 1.0 if value is None or value <= 0 else min(MAX_LIVE_FILES_BIAS, 1.0 + value)


#: A table's margin is the largest its last this many checks asked.
MARGIN_CHECKS = 3


def live_files_margin(checks: Sequence[Mapping[str, object] | None]) -> float:
    """The margin the table's recent checks ask (newest first, the first :data:`MARGIN_CHECKS` counted): the
    largest :func:`live_files_bias` of them. One check that came out small does not undo what the ones
    before it showed: on m03 a check of +6.8 % moved the suggestion to a tuning with room (0.81× the
    bin-pack's files live), whose own check (+4 %) alone would have moved it back to the goal's edge
    (docs/policy-history.md, "A first output model from a calibration, and m03 with the margin")."""
    return max((live_files_bias(c) for c in checks[:MARGIN_CHECKS]), default=1.0)


#: The fewest partitions a check must have seen finished for its end layout to stand for the replay's.
MIN_END_PARTITIONS = 3


def end_in_force(check: Mapping[str, object] | None) -> float | None:
    """How far the table's end layout under the tuning in force missed the end goal, from its check
    (``check["end"]``, :mod:`autooptimize.services.end_check`): the search judges that tuning's end layout on
    it instead of on its replay. None without a check, or when it saw fewer than :data:`MIN_END_PARTITIONS`
    partitions finished (the replay's stands)."""
    end = check.get("end") if check else None
    if not isinstance(end, Mapping) or not isinstance(end.get("partitions"), int):
        return None
    short = end.get("shortfall")
    value = short.get("realised") if isinstance(short, Mapping) else None
    if end["partitions"] < MIN_END_PARTITIONS or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


#: The most checks on record :func:`end_check_of` and :func:`live_check_of` look back through for one of the
#: tuning in force.
END_CHECKS = 8


def end_check_of(checks: Sequence[Mapping[str, object] | None], tuning: PolicyTuning) -> Mapping[str, object] | None:
    """The newest of ``checks`` (newest first, the first :data:`END_CHECKS` looked at) that checked ``tuning``
    (``check["tuning"]``) and saw at least :data:`MIN_END_PARTITIONS` partitions finished: the table's own
    end layout under that tuning (:func:`end_in_force`). A check of fewer commits, or one that saw too few
    partitions finished, does not undo what an earlier check of the same tuning saw: a second ``whatif
    --suggest`` right after a first one checks no commits, and on m06 it judged the tuning in force on its
    replay's end layout again (25.4 MiB², limit 18.8) where the table had held it (13.9) and suggested
    another tuning, which rewrote more bytes. None when no check qualifies (the replay's stands)."""
    return _newest_of(checks, tuning, lambda c: end_in_force(c) is not None)


#: The fewest writer commits a check must have seen for the tuning in force's live files to be judged on
#: what the table kept (:func:`live_check_of`; fewer when the history replayed is shorter).
IN_FORCE_COMMITS = 100


def live_check_of(checks: Sequence[Mapping[str, object] | None], tuning: PolicyTuning,
                  commits: int = IN_FORCE_COMMITS) -> Mapping[str, object] | None:
    """The newest of ``checks`` (as :func:`end_check_of`'s) that checked ``tuning`` over at least ``commits``
    writer commits in which the service merged (:func:`live_files_bias`'s conditions): the search judges the
    tuning in force's mean live files on its replay's times ``1 +`` that check's relative error, what the
    table kept beside what the replay of the same commits said, below 1 as well as above. Every other
    tuning keeps the margin, which only tightens. On m01 a tuning kept 0.991× the bin-pack's files live
    where its replay of the same writes said 1.052×, over the goal's 1.05×: the search left it for a
    neighbour, whose own run's replay then sent it back, a loop that did not settle. None when no check
    qualifies (the replay's, times the margin, stands)."""
    def enough(c: Mapping[str, object]) -> bool:
        n = c.get("commits")
        return isinstance(n, int) and n >= commits and live_error(c) is not None
    return _newest_of(checks, tuning, enough)


def live_error(check: Mapping[str, object] | None) -> float | None:
    """How much more (above 0) or fewer (below) mean live files the table kept than the replay of the same
    commits said (``check["relative_error"]["mean_live_files"]``); None without a check, or where nothing
    merged the table in the checked time (:func:`live_files_bias`'s reasons)."""
    error = check.get("relative_error") if check else None
    realised = check.get("realised") if check else None
    value = error.get("mean_live_files") if isinstance(error, Mapping) else None
    merged = realised.get("bytes_rewritten") if isinstance(realised, Mapping) else None
    if not isinstance(value, int | float) or not value > -1 or not isinstance(merged, int) or merged <= 0:
        return None
    return float(value)


def _newest_of(checks: Sequence[Mapping[str, object] | None], tuning: PolicyTuning,
               ok: Callable[[Mapping[str, object]], bool]) -> Mapping[str, object] | None:
    want = tuning.as_dict()
    for check in checks[:END_CHECKS]:
        if check and check.get("tuning") == want and ok(check):
            return check
    return None


def _meets(f: Figures, base: Figures, end: float | None = None) -> bool:
    """The file goal: mean live files within 1.05× the bin-pack's; files and excess MSE at the end within 10 %
    (``end``: the end layout's shortfall as the table realised it, which stands for ``f``'s)."""
    held = end_layout_holds(f, base) if end is None else end == 0
    return f.mean_live_files <= LIVE_FILES_GOAL * base.mean_live_files and held


def shortfall(f: Figures, base: Figures, end: float | None = None) -> float:
    """How far ``f`` misses the goals, summed as fractions: mean live files over 1.05× the bin-pack's,
    end files over 1.1×, end excess MSE over 1.1× (+ 1 MiB²) (``end``: that end shortfall as the table
    realised it, in place of ``f``'s), write amplification over 1.5 (0 when every goal holds)."""
    live = f.mean_live_files / (LIVE_FILES_GOAL * base.mean_live_files) - 1 if base.mean_live_files else 0.0
    if end is None:
        end = end_shortfall(f.end_files, f.end_excess_mse, base.end_files, base.end_excess_mse)
    return max(0.0, live) + end + max(0.0, f.write_amplification / WRITE_AMPLIFICATION_GOAL - 1)


def candidate_tunings(default: PolicyTuning, fan_ins: Sequence[int] = SUGGEST_FAN_INS,
                      cold_after: Sequence[float] = SUGGEST_COLD_AFTER,
                      leave_alone: Sequence[int] = (0,), quiet_merge: Sequence[bool] = (False, True),
                      cold_gap_factors: Sequence[float] | None = None,
                      prices: Sequence[int] = SUGGEST_PRICES) -> list[PolicyTuning]:
    """Every combination of the given fan-ins, cold-after times, leave-alone sizes, quiet merging and cold
    gap factors (None: ``default``'s and 0, the partition's own cold-after time on and off) at
    ``default``'s target, settle time and tolerance, under the tiers; and each of ``prices`` of the priced
    live rule with every cold-after time, leave-alone size and gap factor, ``default``'s own price among them
    (when priced); ``default`` first."""
    if default.price > 0:
        prices = sorted({*prices, default.price})
    if cold_gap_factors is None:
        cold_gap_factors = tuple(dict.fromkeys((default.cold_gap_factor, 0.0)))
    out = [default]
    for f, c, a, q, k in itertools.product(fan_ins, cold_after, leave_alone, quiet_merge, cold_gap_factors):
        t = PolicyTuning(default.target, f, default.settle_seconds, max(c, default.settle_seconds), a,
                         default.tolerance, q, k, default.late_horizon, price=0)
        if t not in out:
            out.append(t)
    for p, c, a, k in itertools.product(prices, cold_after, leave_alone, cold_gap_factors):
        t = PolicyTuning(default.target, default.fan_in, default.settle_seconds, max(c, default.settle_seconds), a,
                         default.tolerance, False, k, default.late_horizon, p)
        if t not in out:
            out.append(t)
    return out


def suggest_tuning(writes: Sequence[Write], default: PolicyTuning,
                   candidates: Sequence[PolicyTuning] | None = None,
                   every: int = BASELINE_EVERY, latency: float = LATENCY_SECONDS,
                   output_ratio: float = 1.0, start_delay: float | None = None,
                   timer_lag: float = 0.0, timer_every: float = 0.0,
                   file_overhead: int | None = None, pace: SizePace | None = None,
                   live_files_bias: float = 1.0, first_ratio: float = 1.0,
                   end_in_force: float | None = None, live_in_force: float | None = None) -> Suggestion:
    """The candidate tuning that rewrites the fewest bytes over ``writes`` while its mean live files stay
    within :data:`LIVE_FILES_GOAL` × the bin-pack's and its end files within 10 % (the file goal); when
    none does, the one that misses the goals by least (:func:`shortfall`, write amplification included,
    so an unreachable file goal does not buy live files at any price in bytes). Ties go to the earlier
    candidate (``default`` first), so the defaults are kept unless a tuning does strictly better. The best
    :data:`ABSORB_TRIED` candidates that end short of the bin-pack's end layout are tried again with
    ``cold_absorb`` on.
    ``latency``, ``output_ratio``, ``start_delay``, ``timer_lag``, ``timer_every``, ``file_overhead``,
    ``first_ratio`` and ``pace`` as :func:`simulate_policy`'s. With ``timer_every`` (the listener's clock) the search runs on one phase of
    the clock, and the figures of the tuning found and of the defaults are their means over
    :data:`~autooptimize.domain.replay_clock.CLOCK_PHASES` phases (:func:`simulate_on_clock`): that mean is
    the prediction, the goal is judged on it, and the defaults stay unless the tuning found is better on it
    too. A tuning in force that keeps the goals is kept over one that keeps them too unless that one rewrites
    :data:`SWITCH_SAVING` fewer bytes, and fewer on every phase of the clock (``passed_over`` says which and
    why). ``live_files_bias`` (at least 1; :func:`live_files_bias`): the file goal is judged on the replay's
    mean live files times it, for a table whose replays have kept fewer files than the table did; the
    figures returned stay the replay's own. ``end_in_force`` (:func:`end_in_force`): how far the table's end
    layout under ``default`` (the tuning in force) missed the end goal; ``default``'s end layout is judged on
    it instead of on its replay (None: on the replay). ``live_in_force`` (above 0; ``1 +`` :func:`live_error`
    of :func:`live_check_of`): ``default``'s mean live files are judged on its replay's times this, what the
    table kept under it beside its replay, instead of times ``live_files_bias`` (None: the margin)."""
    if not writes:
        raise ValueError("suggest_tuning needs at least one write in the history")
    if not 1.0 <= live_files_bias <= MAX_LIVE_FILES_BIAS:
        raise ValueError(f"live_files_bias must be within [1, {MAX_LIVE_FILES_BIAS:g}], got {live_files_bias!r}")
    if live_in_force is not None and not 0 < live_in_force < float("inf"):
        raise ValueError(f"live_in_force must be a positive number, got {live_in_force!r}")

    def judged(t: PolicyTuning, f: Figures) -> Figures:  # the tuning in force on what the table kept, if known
        factor = live_in_force if t == default and live_in_force is not None else live_files_bias
        return dataclasses.replace(f, mean_live_files=f.mean_live_files * factor)

    cands = list(candidates) if candidates is not None else candidate_tunings(default)
    if default not in cands:
        cands.insert(0, default)
    base = simulate_baseline(writes, default.target, every, output_ratio, file_overhead, first_ratio)

    model = {"output_ratio": output_ratio, "start_delay": start_delay, "timer_lag": timer_lag,
             "file_overhead": file_overhead, "pace": pace, "first_ratio": first_ratio}  # every replay's

    def replay(t: PolicyTuning) -> tuple[PolicyTuning, Figures]:
        return t, simulate_policy(writes, t, latency, timer_every=timer_every, **model)
    results = [replay(t) for t in cands]
    results += [replay(t) for t in _absorbing([(t, judged(t, f)) for t, f in results], base)]
    defaults = next(f for t, f in results if t == default)

    def end_of(t: PolicyTuning) -> float | None:  # the table's own end shortfall stands for its tuning in force's
        return end_in_force if t == default else None

    def rank(t: PolicyTuning, f: Figures) -> tuple[int, float, int]:
        return _rank(judged(t, f), base, end_of(t))
    tuning, fig = min(results, key=lambda tf: rank(*tf))  # the first of equals: the defaults first
    found, kept = [fig], [defaults]  # their figures on each phase of the clock
    if timer_every:

        def on_clock(t: PolicyTuning) -> list[Figures]:
            return simulate_phases(writes, t, latency, every=timer_every, **model)
        found = on_clock(tuning)
        kept = found if tuning == default else on_clock(default)
        fig, defaults = mean_figures(found), mean_figures(kept)
        if rank(default, defaults) <= rank(tuning, fig):  # found on one phase, no better over all
            tuning, fig = default, defaults
    passed_over = None
    if tuning != default and (why := _not_worth_it(rank(default, defaults), rank(tuning, fig), found, kept)):
        passed_over = {"tuning": tuning.as_dict(), "predicted": fig.as_dict(), **why}
        tuning, fig = default, defaults
    return Suggestion(tuning, fig, base, defaults, _meets(judged(tuning, fig), base, end_of(tuning)), len(results),
                      live_files_bias, end_in_force, live_in_force, passed_over)


def _not_worth_it(in_force: tuple[int, float, int], other: tuple[int, float, int],
                  other_phases: Sequence[Figures], in_force_phases: Sequence[Figures]) -> dict[str, object] | None:
    """Why a tuning ranked ``other`` (:func:`_rank`), better than the tuning in force's ``in_force``, should not
    replace it (None: it should): both keep the goals and it saves under :data:`SWITCH_SAVING` of the bytes
    rewritten, or not on every phase of the clock (``*_phases``: their figures on each)."""
    if in_force[0]:  # the tuning in force misses a goal: any tuning better ranked replaces it
        return None
    saving = 1 - other[2] / in_force[2] if in_force[2] else 0.0
    fewer = sum(o.bytes_rewritten < k.bytes_rewritten for o, k in zip(other_phases, in_force_phases, strict=True))
    out = {"saving": round(saving, 6), "phases_fewer": fewer, "phases": len(other_phases), "switch_saving": SWITCH_SAVING}
    if saving < SWITCH_SAVING:
        return {**out, "reason": "saving"}
    if fewer < len(other_phases):
        return {**out, "reason": "phases"}
    return None


def _absorbing(results: Sequence[tuple[PolicyTuning, Figures]], base: Figures) -> list[PolicyTuning]:
    """The :data:`ABSORB_TRIED` candidates that end short of the bin-pack's end layout and come closest to the
    live-files goal, the fewest bytes rewritten first, each with the cold finish giving its remainder a home
    (``cold_absorb``, :mod:`autooptimize.domain.remainder`): that mends the end layout, not the live files,
    and it costs bytes wherever a partition goes cold again, so it is tried only where the end layout needs it."""
    tried = {t for t, _ in results}

    def live_short(f: Figures) -> float:
        return round(max(0.0, f.mean_live_files / (LIVE_FILES_GOAL * base.mean_live_files) - 1), 6)
    missing = sorted(((t, f) for t, f in results if not t.cold_absorb and not end_layout_holds(f, base)),
                     key=lambda tf: (live_short(tf[1]), tf[1].bytes_rewritten))
    out = list(dict.fromkeys(dataclasses.replace(t, cold_absorb=True) for t, _ in missing))
    return [t for t in out if t not in tried][:ABSORB_TRIED]


def _rank(f: Figures, base: Figures, end: float | None = None) -> tuple[int, float, int]:
    """The search's order: those that keep the file goal first, by bytes rewritten; then the rest by how far
    they miss the goals (:func:`shortfall`), then by bytes rewritten. ``end`` as :func:`_meets`'s."""
    if _meets(f, base, end):
        return 0, 0.0, f.bytes_rewritten
    return 1, round(shortfall(f, base, end), 6), f.bytes_rewritten
