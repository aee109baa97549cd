"""Bounded state: the retention job removes what AO_RETENTION_* no longer keeps, in real PostgreSQL,
and nothing else: recent rows, queued and running actions, and the newest history of each hour stay."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from autooptimize.services import tracking
from autooptimize.services.retention import apply_retention
from autooptimize.storage.db import session_scope
from scheduler.beat import beat_schedule
from tasks.control import prune_state
from tests.integration.tables import DAY1, identifier, make_table

OLD = "now() - interval '400 days'"
MIDDLE = "now() - interval '10 days'"


def _table_id(settings, catalog) -> int:
    table = make_table(catalog, {DAY1: 1}, rows=5)
    tracking.track(settings, identifier(table))
    with session_scope(settings) as s:
        return s.execute(text("SELECT id FROM ao_tracked_tables WHERE identifier = :i"),
                         {"i": identifier(table)}).scalar_one()


def _action(s, table_id: int, state: str, finished: str | None) -> str:
    action_id = str(uuid.uuid4())
    s.execute(text(f"""INSERT INTO ao_actions (id, table_id, kind, trigger, priority_class, state, options, timings,
                       attempts, created_at, finished_at)
                       VALUES (:id, :t, 'merge', 'event', 'normal', :state, '{{}}', '{{}}', 1,
                               {finished or 'now()'}, {finished or 'NULL'})"""),
              {"id": action_id, "t": table_id, "state": state})
    s.execute(text(f"""INSERT INTO ao_action_leases (action_id, token, holder, acquired_at, renewed_at, expires_at,
                       released_at) VALUES (:id, nextval('ao_lease_tokens'), '{{}}', {finished or 'now()'},
                       {finished or 'now()'}, {finished or 'now()'}, {finished or 'NULL'})"""), {"id": action_id})
    return action_id


def test_retention_removes_only_what_is_past_its_window(settings, catalog):
    table_id = _table_id(settings, catalog)
    marker = f"retention-test-{uuid.uuid4()}"
    with session_scope(settings) as s:
        s.execute(text(f"INSERT INTO ao_audit_log (at, table_id, event, detail) VALUES ({OLD}, :t, :e, '{{}}'), "
                       "(now(), :t, :e, '{}')"), {"t": table_id, "e": marker})
        old_done = _action(s, table_id, "succeeded", OLD)
        old_queued = _action(s, table_id, "queued", None)
        s.execute(text(f"UPDATE ao_actions SET created_at = {OLD} WHERE id = :id"), {"id": old_queued})
        recent_done = _action(s, table_id, "failed", "now()")
        # history: three rows in one old hour of a partition (two thinned), one expired, one recent
        for at in (f"{MIDDLE}", f"{MIDDLE} + interval '1 second'", f"{MIDDLE} + interval '2 seconds'", OLD, "now()"):
            s.execute(text(f"""INSERT INTO ao_entropy_history (table_id, spec_id, partition_key, source, n_files, sse,
                               mse, recorded_at) VALUES (:t, 0, :k, 'snapshot', 1, 0, 0, {at})"""),
                      {"t": table_id, "k": marker})

    removed = apply_retention(settings)
    assert removed["audit"] >= 1 and removed["actions"] >= 1 and removed["history_thinned"] >= 2
    assert removed["history_expired"] >= 1
    with session_scope(settings) as s:
        audit = s.execute(text("SELECT count(*) FROM ao_audit_log WHERE event = :e"), {"e": marker}).scalar_one()
        states = dict(s.execute(text("SELECT id, state FROM ao_actions WHERE id IN (:a, :b, :c)"),
                                {"a": old_done, "b": old_queued, "c": recent_done}).all())
        leases = s.execute(text("SELECT count(*) FROM ao_action_leases WHERE action_id = :a"),
                           {"a": old_done}).scalar_one()
        history = s.execute(text("SELECT count(*) FROM ao_entropy_history WHERE partition_key = :k"),
                            {"k": marker}).scalar_one()
    assert audit == 1, "the recent audit record stays, the old one goes"
    assert states == {old_queued: "queued", recent_done: "failed"}, "a queued action is never removed"
    assert leases == 0
    assert history == 2, "one row of the old hour and the recent row stay"
    assert apply_retention(settings)["audit"] == 0  # idempotent


def test_the_audit_log_stays_append_only_outside_retention(settings, catalog):
    table_id = _table_id(settings, catalog)
    with session_scope(settings) as s:
        s.execute(text("INSERT INTO ao_audit_log (at, table_id, event, detail) VALUES (now(), :t, 'x', '{}')"),
                  {"t": table_id})
    for statement in ("DELETE FROM ao_audit_log WHERE table_id = :t", "UPDATE ao_audit_log SET event = 'y' WHERE table_id = :t"):
        with pytest.raises(DBAPIError, match="append-only"), session_scope(settings) as s:
            s.execute(text(statement), {"t": table_id})


def test_beat_applies_retention(settings):
    entry = beat_schedule(settings)["retention"]
    assert entry["task"] == "autooptimize.retention" and entry["schedule"] == settings.retention_sweep_seconds
    assert set(prune_state.run()) >= {"audit", "actions", "leases", "history_thinned"}


def test_stats_of_partitions_gone_from_their_table_are_dropped_after_the_window(settings, catalog):
    gone_table, kept_table, live_table = (_table_id(settings, catalog) for _ in range(3))
    with session_scope(settings) as s:
        for table_id, key, files, updated in ((gone_table, "emptied-old", 0, OLD), (gone_table, "emptied-new", 0, "now()"),
                                              (kept_table, "live-old", 3, OLD)):
            s.execute(text(f"""INSERT INTO ao_partition_stats (table_id, spec_id, partition_key, partition_values,
                               n_files, sse, total_bytes, small_files, small_bytes, updated_at)
                               VALUES (:t, 0, :k, '{{}}', :n, 0, 0, 0, 0, {updated})"""),
                      {"t": table_id, "k": key, "n": files})
        # a table the catalog lost long ago (its last observation failed so) and one that failed just now
        for table_id, when in ((live_table, OLD), (kept_table, "now()")):
            s.execute(text(f"""INSERT INTO ao_table_cursors (table_id, last_error, last_error_at, observed_at)
                               VALUES (:t, 'TableNotFound: gone', {when}, {OLD} - interval '1 day')"""),
                      {"t": table_id})
            s.execute(text(f"""INSERT INTO ao_partition_stats (table_id, spec_id, partition_key, partition_values,
                               n_files, sse, total_bytes, small_files, small_bytes, updated_at)
                               VALUES (:t, 0, 'of-a-lost-table', '{{}}', 2, 0, 0, 0, 0, {OLD})"""), {"t": table_id})

    removed = apply_retention(settings)

    with session_scope(settings) as s:
        left = set(s.execute(text("SELECT table_id, partition_key FROM ao_partition_stats WHERE table_id IN (:a, :b, :c)"),
                             {"a": gone_table, "b": kept_table, "c": live_table}).all())
    assert removed["partition_stats_gone"] >= 2
    assert left == {(gone_table, "emptied-new"), (kept_table, "live-old"), (kept_table, "of-a-lost-table")}, \
        "only emptied rows past the window and the rows of a table lost past the window go"
    assert apply_retention(settings)["partition_stats_gone"] == 0  # idempotent
