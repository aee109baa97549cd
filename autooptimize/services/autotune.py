"""AutoAnalyze: replay a table's own commit history through the policy simulator and suggest its tuning.

For a table, the writer commits still in its metadata (every snapshot that is not one of our REPLACE
commits: what each added to each partition, and when) are replayed by
:func:`~autooptimize.domain.suggest.suggest_tuning` over candidate tunings (fan-in, cold-after, the price,
quiet merging, for very small partitions leaving them alone, and where the end layout needs it a cold finish
that gives its remainder a home; the table's target and settle time stay). The suggestion is
the one that rewrites the fewest bytes while keeping the file goal (mean live files within 1.05× and end
files within 1.1× of a blocking bin-pack every 20 commits of the same history). Merged files weigh what
the table's own REPLACE commits say they do (``output_models.learned_output_model``); while it has no fit
of its own, what a calibration measured: a few groups of its files rewritten by the merge engine and removed
(:mod:`~autooptimize.services.output_calibration`, once a table, recorded with the suggestion); without one,
what the service's merges of its other tables wrote (``output_models.borrowed_output_model``); a merge lands as long after
the write that prompted it as the table's own recent merges did (while it has too few, as the service's
merges of its other tables did), and a settle or cold-after moment is
judged as late as the table's own timer merges were (:mod:`autooptimize.services.learned_timings`). It is
recorded on the tracked table with its predicted figures (``suggested_tuning``), shown by ``whatif
--suggest`` and the console, and applied only when the owner allowed it (``track --auto-tune``). Beat re-evaluates the
tracked tables every AO_AUTOTUNE_SECONDS, in rotation and within AO_AUTOTUNE_PASS_SECONDS a pass
(:func:`reevaluate`).

Afterwards, :func:`realised_since` measures what the table really did from its snapshot summaries:
mean live data files after each writer commit (``total-data-files``), and write amplification (bytes our
REPLACE commits removed over bytes the writers added). Each re-evaluation first checks the previous one
(:func:`check_prediction`): the simulator's figures for the writer commits since that suggestion (or since
the tuning in force was set, when that is later or there was none: ``tracking.tuning_in_force_since``), under
the tuning in force, beside what the table did, with their relative error; recorded with the new
suggestion (``check``), in the audit log (``table.tuning_checked``), and shown by ``whatif --suggest``
and the console. Where the table kept more live files than that replay said, the new suggestion's file
goal is judged with that margin: the largest of what the table's last three checks ask
(``domain.suggest.live_files_margin``, recorded as ``live_files_bias``). The check also sets the end layout
of the partitions the table finished since beside the replay's (:mod:`~autooptimize.services.end_check`),
and the tuning in force's end layout is judged on the table's: this check's, or the newest earlier check of
the same tuning that saw partitions finished (``domain.suggest.end_check_of``).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import replace
from typing import Any

from pyiceberg.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from autooptimize.config import Settings
from autooptimize.domain.pace import SizePace
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.replay_clock import CLOCK_PHASES, LISTENER_PASS_SECONDS, simulate_on_clock
from autooptimize.domain.simulate import LATENCY_SECONDS, TimePartition, Write, simulate_baseline
from autooptimize.domain.suggest import (
    END_CHECKS,
    IN_FORCE_COMMITS,
    MARGIN_CHECKS,
    SUGGEST_COLD_AFTER,
    Suggestion,
    candidate_tunings,
    end_check_of,
    end_in_force,
    live_check_of,
    live_error,
    live_files_margin,
    suggest_tuning,
)
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.partitions import time_ordinal
from autooptimize.iceberg.snapshots import HistoryGap, snapshot_diff
from autooptimize.services.choose import policy_tuning
from autooptimize.services.choose import table_target as tracked_target
from autooptimize.services.end_check import end_check, finish_after, finished_partitions, realised_end
from autooptimize.services.learned_timings import (
    ASSUMED,
    ASSUMED_RUN_SECONDS,
    MIN_LATENCY_ACTIONS,
    borrowed_timings,
    learn_timings,
)
from autooptimize.services.output_calibration import choose_output_model
from autooptimize.services.output_models import (
    borrowed_output_model,
    is_replace,
    learned_output_model,
    main_snapshots,
)
from autooptimize.services.sizing import REWRITE_KINDS
from autooptimize.services.tracking import tuning_in_force_since
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, AuditLog, TrackedTable
from autooptimize.storage.repositories import audit, now, tracked_table, tracked_tables
from spark_actors.session import get_session

log = logging.getLogger(__name__)

#: The most recent writer commits a suggestion replays (older ones are left out).
MAX_COMMITS = 5000
#: A suggestion needs at least this many writer commits of history.
MIN_COMMITS = 20


def table_history(table: Table, max_commits: int = MAX_COMMITS) -> list[Write]:
    """The table's writer commits as simulator writes: seconds since the first, and the size of every
    data file each added to each partition (removals by writers are left out). REPLACE commits (ours,
    or any compaction) are not writes."""
    return table_writes(table, max_commits)[0]


def table_writes(table: Table, max_commits: int = MAX_COMMITS) -> tuple[list[Write], int]:
    """:func:`table_history` and the time of its first commit (ms since the epoch; its ``Write.at`` 0)."""
    writers = [s for s in main_snapshots(table) if not is_replace(s)][-max_commits:]
    writes: list[Write] = []
    start = writers[0].timestamp_ms if writers else 0
    for snapshot in writers:
        try:
            diff = snapshot_diff(table, snapshot)
        except HistoryGap:  # a snapshot whose manifests disagree with its summary: replay what it holds
            continue
        files = tuple((_partition(table, spec_id, key), size) for (spec_id, key), d in sorted(diff.partitions.items())
                      for size in d.added)
        if files:
            writes.append(Write((snapshot.timestamp_ms - start) / 1000, files))
    return writes, start


def _partition(table: Table, spec_id: int, key: str) -> Hashable:
    """A replay's key for one partition: a :class:`TimePartition` when its spec has a time field (the
    simulator then models the late-horizon finish), else ``(spec_id, key)``."""
    ordinal = time_ordinal(table.specs().get(spec_id), key)
    return (spec_id, key) if ordinal is None else TimePartition(spec_id, ordinal, key)


def default_tuning(settings: Settings, row: TrackedTable | None, table_target: int | None = None) -> PolicyTuning:
    """The tuning the table runs with now: its own where set, else the service's defaults."""
    target = table_target or tracked_target(settings, row)
    tolerance = min(row.tolerance if row else settings.tolerance_default, target)
    knobs = policy_tuning(settings, row)  # the table's own where set, as planning takes them
    return PolicyTuning(target, knobs["fan_in"], settings.settle_seconds,
                        max(knobs["cold_after_seconds"], settings.settle_seconds), knobs["leave_alone_below"],
                        tolerance, knobs["quiet_merge"], knobs["cold_gap_factor"], knobs["late_horizon"],
                        knobs["price"], knobs["cold_absorb"])


def suggestion_dict(s: Suggestion, commits: int, seconds: float) -> dict[str, Any]:
    return {**s.as_dict(), "commits": commits, "history_seconds": seconds}


def suggest(settings: Settings, identifier: str, *, record: bool = True, apply: bool | None = None,
            min_commits: int = MIN_COMMITS, cold_after: Sequence[float] = SUGGEST_COLD_AFTER,
            latency: float | None = None, table: Table | None = None,
            spark: Callable[[], Any] | None = None) -> dict[str, Any]:
    """The suggested tuning for ``identifier`` from its own history, with predicted, baseline and
    current-tuning figures. ``record``: store it on the tracked table. ``apply``: set it as the table's
    tuning (None: only when the table allows auto-tuning). ``cold_after``: the cold-after times tried;
    ``latency``: seconds from a decision to its commit in the replay (None: the table's own,
    :func:`~autooptimize.services.learned_timings.learn_timings`, with each merge planned when the table's
    own merges started); each timer is judged as late as the table's own timer merges were (the service's
    measured lag until it has enough of them); ``table``: ``identifier`` already loaded (None: loaded here);
    ``spark``: returns a Spark session, called only to calibrate the output model of a table with no fit of
    its own and none recorded (:func:`~autooptimize.services.output_calibration.choose_output_model`; None:
    no calibration, unless the rewrite engine is ``local``). Raises InvalidArgument when the history is
    shorter than ``min_commits`` writer commits."""
    table = table if table is not None else load_table(settings, identifier)
    writes, start_ms = table_writes(table)
    if len(writes) < min_commits:
        raise InvalidArgument(f"table {identifier!r} has {len(writes)} writer commit(s) in its metadata; a "
                              f"suggestion replays at least {min_commits}")
    model = learned_output_model(table)
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        current = default_tuning(settings, row)
        auto = bool(row is not None and row.auto_tune)
        last_at = tuning_in_force_since(session, row) if row is not None else None
        learned = learn_timings(session, row.id, (writes, start_ms), current) if row is not None else ASSUMED
        own_merges = learned.merges
        if latency is None and own_merges < MIN_LATENCY_ACTIONS:  # too few merges of its own: the other tables'
            borrowed = borrowed_timings(session, row.id if row is not None else None, current.settle_seconds)
            if borrowed is not None:
                learned = replace(borrowed, timer_lag=learned.timer_lag, timer_merges=learned.timer_merges)
        merges, start_delay = (learned.merges, learned.start_delay) if latency is None else (0, None)
        pace = learned.pace if latency is None else None
        latency = learned.latency if latency is None else latency
        borrowed = borrowed_output_model(session, row.id if row is not None else None) if not model.commits else None
        recorded = (row.suggested_tuning or {}).get("output_calibration") if row is not None else None
        earlier = earlier_checks(session, row.id) if row is not None else []
        busy = open_action_partitions(session, row.id) if row is not None else set()
    model, calibration, calibration_failed = choose_output_model(settings, table, model, borrowed, recorded,
                                                                 current.target, spark)
    # the previous suggestion's time: what the table did since, under the tuning in force, against the
    # simulator's prediction for the same commits
    ratio, overhead = model.share, model.file_overhead
    lag = learned.timer_lag
    check = (check_prediction(table, current, int(last_at.timestamp() * 1000), latency, output_ratio=ratio,
                              history=(writes, start_ms), start_delay=start_delay, timer_lag=lag,
                              file_overhead=overhead, pace=pace, first_ratio=model.first_ratio, busy=busy)
             if last_at else None)
    leave = sorted({0, min(current.target // 8, 1 << 20)})
    checks = [check, *earlier]  # newest first
    ended = end_check_of(checks, current)  # the newest check that saw this tuning finish partitions
    lived = live_check_of(checks, current, min(IN_FORCE_COMMITS, len(writes)))
    kept = 1.0 + live_error(lived) if lived else None  # what the table kept under it, beside its replay
    result = suggest_tuning(writes, current, candidate_tunings(current, cold_after=cold_after, leave_alone=leave),
                            latency=latency, output_ratio=ratio, start_delay=start_delay, timer_lag=lag,
                            timer_every=LISTENER_PASS_SECONDS, file_overhead=overhead, pace=pace,
                            live_files_bias=live_files_margin(checks),  # what its recent checks ask
                            first_ratio=model.first_ratio, end_in_force=end_in_force(ended), live_in_force=kept)
    out = suggestion_dict(result, len(writes), writes[-1].at)
    out["table"] = identifier
    out["output_ratio"], out["file_overhead"], out["output_commits"] = ratio, overhead, model.commits
    out["output_borrowed"] = model.borrowed
    out["output_calibration"], out["output_calibration_failed"] = calibration, calibration_failed
    out["latency_seconds"], out["latency_merges"], out["start_delay_seconds"] = latency, merges, start_delay
    out["latency_learned"] = merges >= MIN_LATENCY_ACTIONS  # else the simulator's assumed latency (or the given)
    out["latency_borrowed"] = learned.borrowed  # the other tables' merges' (borrowed_timings)
    out["latency_own_merges"] = own_merges
    out["size_pace"] = pace.as_dict() if pace is not None else None  # how a merge's run grows with its bytes
    # else each merge is taken to run ASSUMED_RUN_SECONDS before it lands
    out["start_delay_learned"] = out["latency_learned"] and learned.starts >= MIN_LATENCY_ACTIONS
    out["assumed_run_seconds"] = ASSUMED_RUN_SECONDS
    out["timer_lag_seconds"], out["timer_lag_merges"] = lag, learned.timer_merges
    out["timer_lag_learned"] = learned.timer_merges >= MIN_LATENCY_ACTIONS
    out["listener_pass_seconds"], out["clock_phases"] = LISTENER_PASS_SECONDS, CLOCK_PHASES
    out["check"] = check
    out["end_checked_since_ms"] = ended["since_ms"] if ended else None  # the check end_in_force is from
    out["live_checked_since_ms"] = lived["since_ms"] if lived else None  # the check live_in_force is from
    out["margin_checks"] = sum(1 for c in checks[:MARGIN_CHECKS] if c)  # the checks the margin weighed
    applied = False
    if record or apply:
        with session_scope(settings) as session:
            row = tracked_table(session, settings.catalog, identifier)
            if row is None:
                if apply:
                    raise InvalidArgument(f"table {identifier!r} is not tracked; track it before applying a tuning")
            else:
                row.suggested_tuning = out
                row.suggested_at = now()
                if check is not None:
                    audit(session, "table.tuning_checked", table_id=row.id, identifier=identifier, **check)
                if apply or (apply is None and auto):
                    t = result.tuning
                    row.merge_fan_in, row.cold_after_seconds = t.fan_in, t.cold_after_seconds
                    row.leave_alone_below = t.leave_alone_below or None
                    row.quiet_merge, row.cold_gap_factor = t.quiet_merge, t.cold_gap_factor
                    row.merge_price, row.cold_absorb = t.price, t.cold_absorb
                    applied = True
                    audit(session, "table.auto_tuned", table_id=row.id, identifier=identifier, tuning=t.as_dict(),
                          predicted=result.predicted.as_dict())
    out["applied"] = applied
    return out


def open_action_partitions(session: Session, table_id: int) -> set[tuple[int | None, str | None]]:
    """The ``(spec_id, partition_key)`` of the table's rewrites of data files (``sizing.REWRITE_KINDS``) still
    queued or running (``(None, None)``: one for every partition): a check leaves those partitions out of the
    end layout, as not finished yet."""
    return {(a.spec_id, a.partition_key) for a in session.scalars(
        select(Action).where(Action.table_id == table_id, Action.kind.in_(REWRITE_KINDS),
                             Action.state.in_(("queued", "running"))))}


def earlier_checks(session: Session, table_id: int) -> list[dict[str, Any]]:
    """The table's checks before this one, newest first (``table.tuning_checked`` in the audit log), as many as
    :data:`~autooptimize.domain.suggest.MARGIN_CHECKS` and :data:`~autooptimize.domain.suggest.END_CHECKS` leave
    room for beside the new one."""
    return [e.detail for e in session.scalars(
        select(AuditLog).where(AuditLog.table_id == table_id, AuditLog.event == "table.tuning_checked")
        .order_by(AuditLog.at.desc(), AuditLog.id.desc()).limit(max(MARGIN_CHECKS, END_CHECKS) - 1))]


def realised_since(table: Table, since_ms: int | None = None) -> dict[str, Any]:
    """What the table did from its snapshot summaries since ``since_ms`` (all history when None): writer
    commits, mean live data files after each writer commit, bytes written by writers and rewritten by
    REPLACE commits, and write amplification."""
    commits = 0
    files: list[int] = []
    written = rewritten = 0
    for snapshot in main_snapshots(table):
        if since_ms is not None and snapshot.timestamp_ms < since_ms:
            continue
        summary = snapshot.summary
        if summary is None:
            continue
        if is_replace(snapshot):
            rewritten += int(summary.get("removed-files-size") or 0)
            continue
        commits += 1
        written += int(summary.get("added-files-size") or 0)
        total = summary.get("total-data-files")
        if total is not None:
            files.append(int(total))
    return {"commits": commits, "mean_live_files": sum(files) / len(files) if files else None,
            "bytes_written": written, "bytes_rewritten": rewritten,
            "write_amplification": rewritten / written if written else None}


#: A check of a prediction needs at least this many writer commits since the suggestion it checks.
MIN_CHECK_COMMITS = 10


def check_prediction(table: Table, tuning: PolicyTuning, since_ms: int, latency: float = LATENCY_SECONDS,
                     min_commits: int = MIN_CHECK_COMMITS, output_ratio: float = 1.0,
                     history: tuple[list[Write], int] | None = None,
                     start_delay: float | None = None, timer_lag: float = 0.0,
                     file_overhead: int | None = None, pace: SizePace | None = None,
                     first_ratio: float = 1.0, now_ms: int | None = None,
                     busy: Collection[tuple[int | None, str | None]] = ()) -> dict[str, Any] | None:
    """What the simulator predicts for the writer commits since ``since_ms`` under ``tuning`` (the whole
    history replayed, the figures counted from ``since_ms`` on) beside what the table did in the same
    time (:func:`realised_since`), and the relative error of write amplification and mean live files;
    and, under ``end``, the end layout on the partitions the table has finished by ``now_ms`` (None: now),
    as the replay, the bin-pack's replay and the table have it (:mod:`~autooptimize.services.end_check`),
    less the partitions in ``busy`` (``(spec_id, partition_key)`` of actions still queued or running; a
    ``partition_key`` None: every partition).
    None when fewer than ``min_commits`` writer commits landed since. ``history``: the table's writes and
    the time of its first (as :func:`table_writes` returns them), when the caller has read them already;
    ``start_delay``, ``timer_lag``, ``file_overhead``, ``first_ratio`` and ``pace`` as ``simulate_policy``'s. The prediction is the mean
    over the listener clock's phases (``simulate_on_clock``), as the suggestion's."""
    writes, start_ms = history if history is not None else table_writes(table)
    measure_from = (since_ms - start_ms) / 1000
    commits = sum(1 for w in writes if w.at >= measure_from)
    if commits < min_commits:
        return None
    now = ((time.time() * 1000 if now_ms is None else now_ms) - start_ms) / 1000
    after = finish_after(tuning, latency)
    finished = finished_partitions(writes, measure_from, now, after)
    if any(key is None for _, key in busy):
        finished = set()
    finished -= {_partition(table, spec_id, key) for spec_id, key in busy if spec_id is not None and key is not None}
    replayed = simulate_on_clock(writes, tuning, latency, timer_lag=timer_lag, measure_from=measure_from,
                                 output_ratio=output_ratio, start_delay=start_delay, file_overhead=file_overhead,
                                 pace=pace, first_ratio=first_ratio, end_parts=finished)
    predicted = replayed.as_dict()
    realised = realised_since(table, since_ms)
    error = {}
    for key in ("write_amplification", "mean_live_files"):
        p, r = predicted[key], realised[key]
        error[key] = (r - p) / p if p and r is not None else None
    out = {"since_ms": since_ms, "commits": commits, "tuning": tuning.as_dict(),
           "predicted": {k: predicted[k] for k in ("mean_live_files", "write_amplification", "bytes_written",
                                                   "bytes_rewritten")},
           "realised": realised, "relative_error": error, "end": None}
    if finished:
        base = simulate_baseline(writes, tuning.target, output_ratio=output_ratio, file_overhead=file_overhead,
                                 first_ratio=first_ratio, end_parts=finished)
        held = realised_end(table, finished, lambda spec_id, key: _partition(table, spec_id, key), tuning.target)
        out["end"] = end_check(replayed, base, held, len(finished), after)
    return out


def writer_commits_since(table: Table, since_ms: int) -> int:
    """Writer commits (not REPLACE) on the main branch at or after ``since_ms``: snapshot summaries only,
    no manifest read."""
    return sum(1 for s in main_snapshots(table) if s.timestamp_ms >= since_ms and not is_replace(s))


def reevaluate(settings: Settings, clock: Callable[[], float] = time.monotonic) -> dict[str, str]:
    """Beat's pass: a fresh suggestion for each enabled tracked table with enough history, applied where
    the owner allowed it. Returns each table's outcome: ``applied`` or ``recorded``; ``unchanged`` (fewer
    than AO_AUTOTUNE_MIN_NEW_COMMITS writer commits since its last suggestion: the replay would say the
    same); ``deferred`` (the pass had run AO_AUTOTUNE_PASS_SECONDS: a suggestion replays the history about
    200 times, up to a minute for a table of 5,000 commits, and the pass runs on the control queue beside
    decide); ``skipped`` or ``failed`` with the reason. Tables go in rotation: never suggested first, then
    the longest since their last suggestion, so a deferred table is first in the next pass."""
    with session_scope(settings) as session:
        rows = [(t.identifier, t.suggested_at) for t in tracked_tables(session, settings.catalog) if t.enabled]
    rows.sort(key=lambda r: (r[1] is not None, r[1].timestamp() if r[1] is not None else 0.0, r[0]))
    outcome: dict[str, str] = {}
    started = clock()
    for name, last in rows:
        if clock() - started >= settings.autotune_pass_seconds:
            outcome[name] = (f"deferred: this pass ran its {settings.autotune_pass_seconds} s "
                             "(AO_AUTOTUNE_PASS_SECONDS); first in line next pass")
            continue
        try:
            table = load_table(settings, name)
            new = writer_commits_since(table, int(last.timestamp() * 1000)) if last is not None else None
            if new is not None and new < settings.autotune_min_new_commits:
                outcome[name] = (f"unchanged: {new} writer commit(s) since its last suggestion; re-evaluated "
                                 f"after {settings.autotune_min_new_commits} (AO_AUTOTUNE_MIN_NEW_COMMITS)")
                continue
            out = suggest(settings, name, table=table, spark=lambda: get_session(settings))
            outcome[name] = "applied" if out["applied"] else "recorded"
        except InvalidArgument as exc:
            outcome[name] = f"skipped: {exc}"
        except Exception as exc:  # one table must not stop the others
            log.warning("autotune of %s failed (%s: %s)", name, type(exc).__name__, exc)
            outcome[name] = f"failed: {type(exc).__name__}"
    counts = collections.Counter(v.split(":", 1)[0] for v in outcome.values())
    log.info("autotune pass: %d table(s) in %.1f s: %s", len(outcome), clock() - started,
             ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none tracked")
    return outcome
