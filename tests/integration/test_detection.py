"""New tables matching AO_AUTO_TRACK are tracked by the listener's own loop within seconds."""

from __future__ import annotations

from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from scheduler.listener import AutoTracker
from tests.integration.tables import DAY1, identifier, make_table


def test_listener_tracks_a_matching_table_on_its_next_pass(settings, catalog):
    table = make_table(catalog, {DAY1: 1}, rows=5, name="autodetect")
    name = identifier(table)
    variant = settings.model_copy(update={"auto_track": "test.autodetect_*", "auto_track_seconds": 60.0})
    tracker = AutoTracker(variant)
    assert name in tracker.run_due(now=1000.0)
    with session_scope(variant) as session:
        assert tracked_table(session, variant.catalog, name) is not None
    # within the interval the catalog is not listed again; after it, a second new table is found
    second = identifier(make_table(catalog, {DAY1: 1}, rows=5, name="autodetect"))
    assert tracker.run_due(now=1030.0) == []
    assert tracker.run_due(now=1061.0) == [second]


def test_no_patterns_lists_nothing(settings, catalog):
    make_table(catalog, {DAY1: 1}, rows=5, name="notracked")
    assert AutoTracker(settings.model_copy(update={"auto_track": ""})).run_due(now=0.0) == []
