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
           state: str = "succeeded") -> Action:
    return Action(id=str(uuid.uuid4()), table_id=table_id, kind="merge", trigger="event",
                  priority_class="interactive", state=state, created_at=created, prompted_at=prompted,
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
