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


def test_whatif_simulates_settings_without_changing_anything(settings, catalog):
    import pytest

    from autooptimize.errors import InvalidArgument
    from autooptimize.services.explain import whatif
    from tests.integration.tables import DAY2, live_files

    table = make_table(catalog, {DAY1: 6, DAY2: 1})
    snapshot = table.refresh().current_snapshot().snapshot_id
    day1_bytes = sum(r["file_size_in_bytes"] for r in table.inspect.files().to_pylist()
                     if "day=2026-01-01" in r["file_path"])
    big, tiny = whatif(settings, identifier(table), ["1MiB", "1KiB"])
    assert (big["files_before"], big["files_after"], big["files_replaced"]) == (7, 2, 6)
    assert big["bytes_rewritten"] == day1_bytes and big["mse_after"] < big["mse_before"]
    assert (tiny["files_after"], tiny["bytes_rewritten"], tiny["mse_before"]) == (7, 0, 0.0)  # all ≥ target
    assert len(live_files(table)) == 7 and table.refresh().current_snapshot().snapshot_id == snapshot
    with pytest.raises(InvalidArgument, match="target_file_size"):
        whatif(settings, identifier(table), ["0"])


def test_min_interval_defers_a_new_action_on_a_recently_merged_partition(settings, catalog):
    from sqlalchemy import select, update

    from autooptimize.storage.models import Action, AuditLog
    from autooptimize.storage.repositories import now

    table = make_table(catalog, {DAY1: 3})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", min_interval_seconds=3600)
    scan_table(settings, ident)
    with session_scope(settings) as s:
        table_id = tracked_table(s, settings.catalog, ident).id
    first = submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False)
    with session_scope(settings) as s:  # as if it merged a minute ago
        s.execute(update(Action).where(Action.id == first).values(state="succeeded", finished_at=now()))
    assert submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False) is None
    with session_scope(settings) as s:
        events = s.scalars(select(AuditLog).where(AuditLog.table_id == table_id,
                                                   AuditLog.event == "decision.deferred")).all()
    assert [e.detail["reason"] for e in events] == ["min_interval"]
    tracking.track(settings, ident, min_interval_seconds=0)
    assert submit_for_partition(settings, table_id, 0, "day=2026-01-01", dispatch=False) is not None
