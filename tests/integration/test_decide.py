"""Decide: the listener's hand-off submits a merge once, and does not re-ask about a partition that
was judged and has not changed since."""

from __future__ import annotations

from autooptimize.services import actions, tracking
from autooptimize.services.decide import submit_for_partition
from autooptimize.services.observe import scan_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from tests.integration.tables import DAY1, batch, identifier, make_table


def test_a_judged_partition_is_not_resubmitted_until_it_changes(settings, catalog):
    table = make_table(catalog, {DAY1: 1})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    scan_table(settings, ident)
    with session_scope(settings) as s:
        table_id = tracked_table(s, settings.catalog, ident).id

    first = submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False)
    assert first is not None
    out = actions.execute(settings, first, spark=None)
    assert out["state"] == "skipped" and out["reason"] == "nothing_to_merge"
    assert out["trigger"] == "event"

    assert submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False) is None

    table.append(batch(1000, 10, DAY1))
    scan_table(settings, ident)
    again = submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False)
    assert again is not None and again != first


def test_auto_tracking_by_namespace_pattern_is_opt_in(settings, catalog):
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from autooptimize.services.tracking import auto_track
    from tests.integration.tables import SCHEMA, SPEC

    try:
        catalog.create_namespace("autotrack")
    except NamespaceAlreadyExistsError:
        pass
    catalog.create_table("autotrack.clicks", schema=SCHEMA, partition_spec=SPEC)
    catalog.create_table("autotrack.views_tmp", schema=SCHEMA, partition_spec=SPEC)
    assert auto_track(settings) == []  # no patterns: nothing is tracked
    opted_in = settings.model_copy(update={"auto_track": "autotrack.c*"})
    assert auto_track(opted_in) == ["autotrack.clicks"]
    assert auto_track(opted_in) == []  # idempotent
    with session_scope(settings) as s:
        row = tracked_table(s, settings.catalog, "autotrack.clicks")
        assert row is not None and row.target_file_size == settings.default_target_file_size
        assert tracked_table(s, settings.catalog, "autotrack.views_tmp") is None


def test_tables_not_observed_recently_are_stale(settings, catalog):
    from autooptimize.services.observe import stale_tables

    table = make_table(catalog, {DAY1: 2})
    ident = identifier(table)
    tracking.track(settings, ident)
    assert ident in stale_tables(settings)  # never observed
    scan_table(settings, ident)
    assert ident not in stale_tables(settings)
    assert ident in stale_tables(settings.model_copy(update={"rescan_after_seconds": -1}))
