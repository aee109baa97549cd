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
