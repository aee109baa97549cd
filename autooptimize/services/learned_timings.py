"""How fast a table's own merges were, for AutoAnalyze's replay (:mod:`autooptimize.services.autotune`).

From the table's most recent succeeded merges (``ao_actions``) and its writer commits (``table_writes``):

- the latency: seconds from what prompted a merge to its commit (``simulate_policy``'s ``latency``);
- the start delay: seconds from what prompted it to its start, where the action reads the partition's
  files and plans (``start_delay``);
- the timer lag: seconds from a partition's settle or cold-after moment to the merge that the listener's
  handover of it prompted (``timer_lag``). The listener hands settled and cold partitions over at most once
  a second, so the service judges a timer later than the moment; a write meanwhile cancels it, and a
  replay that judged every timer at once re-finished small hours the service did not
  (docs/policy-history.md, "A late file re-reading a small partition").

- the pace: how much longer a merge runs for each MB it reads (:func:`~autooptimize.domain.pace.fit_pace`),
  from the same merges' bytes and their runs from start to commit.

While a table has fewer merges than that takes, :func:`borrowed_timings` gives the latency, start delay and
pace of the service's recent merges of its other tables, each counted from the write recorded as its prompt.
"""

from __future__ import annotations

import bisect
import collections
import statistics
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from autooptimize.domain.pace import SizePace, fit_pace
from autooptimize.domain.policy import COLD_GAPS_KEPT, DEFAULT_SETTLE_SECONDS, PolicyTuning
from autooptimize.domain.simulate import LATENCY_SECONDS, TimePartition, Write
from autooptimize.storage.models import Action, ActionState

#: The table's most recent merges read, and how many are needed to replace the simulator's assumed latency
#: (and its start delay, and its timer lag: each from as many merges that show it).
LATENCY_ACTIONS, MIN_LATENCY_ACTIONS = 200, 10
#: A merge created longer than this after its partition's last settle or cold-after moment was not prompted
#: by that moment's handover (a scan, the late-horizon finish, a retry): it is left out of the timer lag.
MAX_TIMER_LAG = 5.0
#: The most a settle moment's judgement comes after it (0.35–1.8 s measured). The service judges a partition
#: it left alone as written to again only once that verdict is the settle time old (services.submit_decided),
#: so a cold moment sooner than this and twice the settle time after the partition's last write may have
#: waited for it: its merge is left out of the timer lag, which would count that wait too (the replay on the
#: listener's clock models the wait itself: domain.replay_clock).
SETTLE_VERDICT_LAG = 2.0
#: The timer lag a replay assumes until the table has :data:`MIN_LATENCY_ACTIONS` merges prompted by a
#: timer: the mean of six cold handovers of a live run (0.35–1.8 s; docs/policy-history.md).
TIMER_LAG_SECONDS = 0.85


@dataclass(frozen=True)
class LearnedTimings:
    """What :func:`learn_timings` read. ``merges``: the merges the latency is the median of (0 when the
    latency is the simulator's assumed one); ``start_delay``: the median of their starts, or, while fewer
    than :data:`MIN_LATENCY_ACTIONS` of them recorded their start, :data:`ASSUMED_RUN_SECONDS` before the
    latency (the assumed one or the learned one alike; None only where a caller builds one to plan each
    merge as it lands); ``timer_merges``: the merges prompted by a timer
    the lag is the median of (fewer than :data:`MIN_LATENCY_ACTIONS`: the lag is :data:`TIMER_LAG_SECONDS`)."""

    latency: float
    merges: int
    start_delay: float | None
    timer_lag: float
    timer_merges: int
    starts: int = 0  # the merges that recorded their start (the start delay is their median from MIN_LATENCY_ACTIONS)
    borrowed: bool = False  # the latency and start delay are the other tables' merges' (borrowed_timings)
    pace: SizePace | None = None  # how a merge's run grows with its bytes (None: too few merges recorded them)


#: Seconds a merge runs from its start to its commit: 0.28 s p50 through the Spark Connect server in the DoD 2
#: live test, 0.18–0.2 s in benchmarks.streaming's service (measured in session 37; 0.4 until session 38, from
#: older runs of 0.3–0.6 s; docs/policy-history.md). Until a table's merges show when they start, a merge is taken to start, and
#: plan, this long before it lands: the service plans a merge when it starts, and a replay that planned each
#: as it landed predicted 14.7 mean live files where the DoD 2 live test kept 17.2 (its own timings
#: replayed: 16.7; session 36).
ASSUMED_RUN_SECONDS = 0.3
#: A table with no merges of its own: the simulator's assumed latency, each merge started (and planned)
#: :data:`ASSUMED_RUN_SECONDS` before it lands.
ASSUMED = LearnedTimings(LATENCY_SECONDS, 0, LATENCY_SECONDS - ASSUMED_RUN_SECONDS, TIMER_LAG_SECONDS, 0)


def learn_timings(session: Session, table_id: int, history: tuple[Sequence[Write], int] | None = None,
                  tuning: PolicyTuning | None = None) -> LearnedTimings:
    """The table's latency, start delay and timer lag from one read of its most recent succeeded merges.

    A merge counts from its ``created_at`` (queueing, the Spark job and the commit) to its
    ``finished_at``. With ``history`` (the table's writes and the time of the first, as ``table_writes``
    gives them), a merge created within the settle time (``tuning``'s; the default without one) of a write to
    its partition was prompted by that write. It then counts from the write: the listener noticing the
    commit and the decision come first, and the simulator decides at the write itself. A merge created later
    was prompted by a timer and counts from its ``created_at``; with ``tuning`` too, its timer lag is the
    time from the latest of its partition's settle and cold-after moments (the last write plus the settle
    time, and plus ``tuning.cold_after`` of the gaps between the partition's writes before it) to its
    ``created_at``, when at most :data:`MAX_TIMER_LAG` and not a cold moment that may have waited for the
    settle verdict (:data:`SETTLE_VERDICT_LAG`)."""
    settle = tuning.settle_seconds if tuning is not None else DEFAULT_SETTLE_SECONDS
    rows = session.execute(
        select(Action.created_at, Action.started_at, Action.finished_at, Action.bytes_in, Action.spec_id,
               Action.partition_key)
        .where(Action.table_id == table_id, Action.kind == "merge", Action.state == ActionState.SUCCEEDED.value,
               Action.finished_at.is_not(None))
        .order_by(Action.finished_at.desc()).limit(LATENCY_ACTIONS)).all()
    written: dict[Hashable, list[float]] = collections.defaultdict(list)  # partition → its commits' times
    start = 0.0
    if history is not None:
        writes, start_ms = history
        start = start_ms / 1000
        for w in writes:  # in time order
            for part, _ in w.files:
                times = written[(part.spec_id, part.key) if isinstance(part, TimePartition) else part]
                if not times or times[-1] < w.at:  # one per commit, as the listener keeps them
                    times.append(w.at)
    dones: list[float] = []
    starts: list[float] = []
    runs: list[tuple[int, float]] = []
    lags: list[float] = []
    for created, started, done, bytes_in, spec_id, key in rows:
        if done is None:  # the query asks for finished merges only
            continue
        at = created.timestamp() - start
        times = written.get((spec_id, key), []) if spec_id is not None and key is not None else []
        i = bisect.bisect_right(times, at) - 1
        since = 0.0
        if i >= 0 and at - times[i] <= settle:
            since = at - times[i]
        elif i >= 0 and tuning is not None:
            lag = _timer_lag(times, i, at, tuning)
            if lag is not None:
                lags.append(lag)
        _count(dones, starts, runs, created, started, done, bytes_in, since)
    return _timings(dones, starts, lags, runs)


def borrowed_timings(session: Session, table_id: int | None,
                     settle_seconds: float = DEFAULT_SETTLE_SECONDS) -> LearnedTimings | None:
    """The latency, start delay and pace of the service's :data:`LATENCY_ACTIONS` most recent succeeded merges
    of tables other than ``table_id`` that recorded the write that prompted them (``Action.prompted_at``, set
    by decide); None while fewer than :data:`MIN_LATENCY_ACTIONS` did. A table with too few merges of its own
    replays with them rather than the simulator's assumed latency, which is 5× what merges take on a warm
    service today (2 s against 0.35–0.45 s; docs/policy-history.md, "Timings borrowed from the other tables").
    :func:`timings_of_merges` counts them."""
    return timings_of_merges(session.execute(lendable_merges(table_id)).all(), settle_seconds)


def lendable_merges(table_id: int | None) -> Select[tuple[datetime, datetime | None, datetime | None, int | None,
                                                          datetime | None]]:
    """The query :func:`borrowed_timings` reads: creation, start, finish, bytes read and prompt of the most
    recent succeeded merges of tables other than ``table_id`` that recorded their prompt."""
    query = (select(Action.created_at, Action.started_at, Action.finished_at, Action.bytes_in, Action.prompted_at)
             .where(Action.kind == "merge", Action.state == ActionState.SUCCEEDED.value,
                    Action.finished_at.is_not(None), Action.prompted_at.is_not(None))
             .order_by(Action.finished_at.desc()).limit(LATENCY_ACTIONS))
    return query if table_id is None else query.where(Action.table_id != table_id)


def timings_of_merges(rows: Iterable[Sequence[Any]], settle_seconds: float = DEFAULT_SETTLE_SECONDS,
                      ) -> LearnedTimings | None:
    """Borrowed timings from merges as :func:`lendable_merges` reads them: a merge created within
    ``settle_seconds`` of its write counts from the write, as :func:`learn_timings` counts a table's own; a
    later one (a timer prompted it) from its creation. None while fewer than :data:`MIN_LATENCY_ACTIONS`. The
    timer lag is not borrowed: :data:`TIMER_LAG_SECONDS`, for the caller to replace with the table's own."""
    dones: list[float] = []
    starts: list[float] = []
    runs: list[tuple[int, float]] = []
    for created, started, done, bytes_in, prompted in rows:
        since = (created - prompted).total_seconds()
        _count(dones, starts, runs, created, started, done, bytes_in, since if 0 <= since <= settle_seconds else 0.0)
    if len(dones) < MIN_LATENCY_ACTIONS:
        return None
    return replace(_timings(dones, starts, [], runs), borrowed=True)


def _count(dones: list[float], starts: list[float], runs: list[tuple[int, float]], created: datetime,
           started: datetime | None, done: datetime, bytes_in: int | None, since: float) -> None:
    """One merge's seconds to its commit and, when it recorded it, to its start, from what prompted it
    (``since`` seconds before its creation); and with its bytes, what it read and its run from its start."""
    dones.append((done - created).total_seconds() + since)
    if started is not None:
        starts.append((started - created).total_seconds() + since)
        if bytes_in is not None:
            runs.append((bytes_in, max((done - started).total_seconds(), 0.0)))


def _timings(dones: Sequence[float], starts: Sequence[float], lags: Sequence[float],
             runs: Sequence[tuple[int, float]] = ()) -> LearnedTimings:
    """Timings from each merge's seconds to its commit and to its start (from what prompted it), the timer
    lags and each merge's bytes and run: their medians and pace, or the assumed ones while too few."""
    if len(dones) < MIN_LATENCY_ACTIONS:
        return LearnedTimings(LATENCY_SECONDS, len(dones), ASSUMED.start_delay, _lag(lags), len(lags), len(starts))
    latency = min(max(statistics.median(dones), 0.1), 600.0)
    # too few merges recorded their start (the service records it for every merge it runs): each is taken
    # to have run the assumed time, as a table's first merges are, since the service plans a merge at its start
    start_delay = (min(max(statistics.median(starts), 0.0), latency) if len(starts) >= MIN_LATENCY_ACTIONS
                   else max(latency - ASSUMED_RUN_SECONDS, 0.0))
    # the pace needs each merge's start: without the learned start delay the replay plans at an assumed one
    pace = fit_pace(runs) if len(starts) >= MIN_LATENCY_ACTIONS else None
    return LearnedTimings(latency, len(dones), start_delay, _lag(lags), len(lags), len(starts), pace=pace)


def _timer_lag(times: Sequence[float], i: int, at: float, tuning: PolicyTuning) -> float | None:
    """Seconds from the latest settle or cold-after moment of a partition last written at ``times[i]`` (its
    commits' times, oldest first) that had passed at ``at``, to ``at``; None when more than
    :data:`MAX_TIMER_LAG` (or none had passed), or when that is a cold moment that may have waited for the
    settle verdict (:data:`SETTLE_VERDICT_LAG`)."""
    gaps = [times[j] - times[j - 1] for j in range(i, max(i - COLD_GAPS_KEPT, 0), -1)]  # newest first
    settle_at, cold_at = times[i] + tuning.settle_seconds, times[i] + tuning.cold_after(gaps)
    passed = [m for m in (settle_at, cold_at) if m <= at]
    if not passed:
        return None
    moment = max(passed)
    if settle_at < moment == cold_at < settle_at + tuning.settle_seconds + SETTLE_VERDICT_LAG:
        return None
    lag = at - moment
    return lag if lag <= MAX_TIMER_LAG else None


def _lag(lags: Sequence[float]) -> float:
    return statistics.median(lags) if len(lags) >= MIN_LATENCY_ACTIONS else TIMER_LAG_SECONDS
