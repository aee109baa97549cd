"""A table with too few merges of its own replays with the timings of the service's merges of its other
tables (``services.learned_timings.borrowed_timings``), counted from the write that prompted each
(``Action.prompted_at``), rather than the simulator's assumed latency."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete

from autooptimize.domain.simulate import LATENCY_SECONDS
from autooptimize.services import tracking
from autooptimize.services.autotune import suggest
from autooptimize.services.learned_timings import LATENCY_ACTIONS, MIN_LATENCY_ACTIONS, borrowed_timings
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action
from tests.integration.tables import DAY1, identifier, make_table

#: Later than any merge a test runs, so the recorded merges are the service's most recent.
LATER = datetime(2100, 1, 1, tzinfo=UTC)


def _merge(table_id: int, created: datetime, ran: float, started_after: float | None, prompted: datetime | None,
           state: str = "succeeded", bytes_in: int | None = None) -> Action:
    return Action(id=str(uuid.uuid4()), table_id=table_id, kind="merge", trigger="event",
                  priority_class="interactive", state=state, created_at=created, prompted_at=prompted, bytes_in=bytes_in,
                  started_at=None if started_after is None else created + timedelta(seconds=started_after),
                  finished_at=created + timedelta(seconds=ran))


def test_a_table_with_too_few_merges_borrows_its_timings_from_the_other_tables(settings, catalog):
    table = make_table(catalog, {DAY1: 20}, rows=20, name="borrows")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(settings, name)
    other_id = tracking.ensure_tracked(settings, identifier(make_table(catalog, {DAY1: 2}, rows=5, name="lends")))
    with session_scope(settings) as session:  # what the tests before this one lent
        before = borrowed_timings(session, other_id, settle_seconds=3.0)
    try:
        with session_scope(settings) as session:
            for i in range(3):  # three merges of its own: too few to learn from
                session.add(_merge(table_id, LATER - timedelta(days=1, seconds=i), 9.0, 8.0, None))
            for i in range(LATENCY_ACTIONS):
                created = LATER + timedelta(seconds=10 * i)
                if i % 2:  # noticed 0.3 s after its write: counts from the write (0.3 + 0.5 s; started 0.4 s)
                    session.add(_merge(other_id, created, 0.5, 0.1, created - timedelta(seconds=0.3)))
                else:  # a timer's, 10 s after the write (past the settle time): from its creation (0.5; 0.1)
                    session.add(_merge(other_id, created, 0.5, 0.1, created - timedelta(seconds=10)))
            # newer, but neither recorded what prompted it nor succeeded: not borrowed
            session.add(_merge(other_id, LATER + timedelta(days=9), 60.0, 1.0, None))
            session.add(_merge(other_id, LATER + timedelta(days=9), 60.0, 1.0, LATER, state="failed"))
        with session_scope(settings) as session:
            lent = borrowed_timings(session, table_id, settle_seconds=3.0)
            assert borrowed_timings(session, other_id, settle_seconds=3.0) == before  # its own are never borrowed
        assert lent is not None and lent.borrowed and lent.merges == lent.starts == LATENCY_ACTIONS
        # the medians of 100 × 0.8 s and 100 × 0.5 s, and of 100 × 0.4 s and 100 × 0.1 s
        assert abs(lent.latency - 0.65) < 1e-6 and abs(lent.start_delay - 0.25) < 1e-6

        out = suggest(settings, name, min_commits=10, record=False)
        assert out["latency_borrowed"] is True and out["latency_own_merges"] == 3
        assert (out["latency_merges"], out["latency_learned"], out["start_delay_learned"]) == (LATENCY_ACTIONS, True, True)
        assert abs(out["latency_seconds"] - 0.65) < 1e-6 and abs(out["start_delay_seconds"] - 0.25) < 1e-6
        assert out["timer_lag_learned"] is False  # the timer lag is the table's own (here the assumed one)
        shown = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                               capture_output=True, text=True, env=dict(os.environ), timeout=300)
        assert shown.returncode == 0, shown.stderr
        assert (f"a merge lands 0.65 s after the write that prompted it and plans 0.25 s after it (median of the "
                f"service's last {LATENCY_ACTIONS} merges of other tables; the table has 3 merge(s) of its own, too "
                f"few to learn it from)") in shown.stdout, shown.stdout
        given = suggest(settings, name, min_commits=10, record=False, latency=LATENCY_SECONDS)  # a given latency wins
        assert given["latency_borrowed"] is False and given["latency_seconds"] == LATENCY_SECONDS

        with session_scope(settings) as session:  # enough of its own: its own median (9 s), nothing borrowed
            for i in range(3, MIN_LATENCY_ACTIONS):
                session.add(_merge(table_id, LATER - timedelta(days=1, seconds=i), 9.0, 8.0, None))
        own = suggest(settings, name, min_commits=10, record=False)
        assert own["latency_borrowed"] is False and own["latency_merges"] == MIN_LATENCY_ACTIONS
        assert abs(own["latency_seconds"] - 9.0) < 1e-6
    finally:  # the merges dated 2100 would be every later test's most recent
        with session_scope(settings) as session:
            session.execute(delete(Action).where(Action.table_id.in_((table_id, other_id))))


def test_a_table_borrows_how_a_merge_runs_longer_for_what_it_reads_and_learns_it_from_its_own(settings, catalog):
    """The other tables' merges read 1 MB to 1 GB, each running 0.2 s plus 0.02 s a MB: the table borrows that
    pace, the replay and ``whatif`` use and show it. Its own ten merges, all of one size, show no slope."""
    table = make_table(catalog, {DAY1: 20}, rows=20, name="paced")
    name = identifier(table)
    tracking.track(settings, name, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(settings, name)
    other_id = tracking.ensure_tracked(settings, identifier(make_table(catalog, {DAY1: 2}, rows=5, name="lends_pace")))
    later = LATER + timedelta(days=400)  # after what the other test in this file dates its merges
    try:
        with session_scope(settings) as session:
            for i in range(LATENCY_ACTIONS):
                mb = 10 ** (3 * i / (LATENCY_ACTIONS - 1))  # 1 MB to 1 GB
                created = later + timedelta(seconds=60 * i)
                run = 0.2 + 0.02 * mb
                session.add(_merge(other_id, created, 0.1 + run, 0.1, created, bytes_in=int(mb * 1e6)))
        with session_scope(settings) as session:
            lent = borrowed_timings(session, table_id, settle_seconds=3.0)
        assert lent is not None and lent.pace is not None and lent.pace.merges == LATENCY_ACTIONS
        assert abs(lent.pace.seconds_per_mb - 0.02) < 1e-6 and 28 < lent.pace.reference_mb < 36  # √1000 ≈ 31.6

        out = suggest(settings, name, min_commits=10, record=False)
        assert out["latency_borrowed"] is True
        assert out["size_pace"] == lent.pace.as_dict()
        shown = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                               capture_output=True, text=True, env=dict(os.environ), timeout=300)
        assert shown.returncode == 0, shown.stderr
        assert 0.2 < lent.pace.floor_seconds < 0.25  # what the smallest tenth (1–2 MB) ran
        assert (f"a merge runs 2.00 s longer for each 100 MB it reads over {lent.pace.reference_mb:.1f} MB, and as "
                f"much shorter under down to {lent.pace.floor_seconds:.2f} s (fitted on {LATENCY_ACTIONS} merges' "
                "bytes and runs)") in shown.stdout, shown.stdout

        with session_scope(settings) as session:  # ten of its own, of one size: its own pace, no slope
            for i in range(MIN_LATENCY_ACTIONS):
                created = later - timedelta(days=1, seconds=10 * i)
                session.add(_merge(table_id, created, 1.0, 0.2, None, bytes_in=5_000_000 + 1000 * i))
        own = suggest(settings, name, min_commits=10, record=False)
        assert own["latency_borrowed"] is False
        assert own["size_pace"]["seconds_per_mb"] == 0.0 and own["size_pace"]["merges"] == MIN_LATENCY_ACTIONS
        shown = subprocess.run([sys.executable, "-m", "autooptimize.cli", "whatif", name, "--suggest"],
                               capture_output=True, text=True, env=dict(os.environ), timeout=300)
        assert "their sizes too close to show a slope" in shown.stdout, shown.stdout
    finally:
        with session_scope(settings) as session:
            session.execute(delete(Action).where(Action.table_id.in_((table_id, other_id))))
