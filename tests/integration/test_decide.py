"""Decide: the listener's hand-off is measured and decided (with a reason in the audit log) once, and
a partition judged and unchanged since is not measured again."""

from __future__ import annotations

import pytest

from autooptimize.services import actions, tracking
from autooptimize.services.observe.scan import scan_table
from autooptimize.services.submit_decided import submit_for_partition
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from tests.integration.tables import DAY1, batch, identifier, key_of, make_table


def test_a_judged_partition_is_not_resubmitted_until_it_changes(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    table = make_table(catalog, {DAY1: 1})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    scan_table(settings, ident)
    with session_scope(settings) as s:
        table_id = tracked_table(s, settings.catalog, ident).id

    # one small file: decide measures it, finds it at its best layout (the health rule), records why,
    # submits nothing
    assert submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False) is None
    with session_scope(settings) as s:
        skipped = _decisions(s, table_id)
    assert [(e.event, e.detail["reason"]) for e in skipped] == [("decision.skipped", "below_threshold")]
    # unchanged: not measured again (no second record)
    assert submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False) is None
    with session_scope(settings) as s:
        assert len(_decisions(s, table_id)) == 1

    table.append(batch(1000, 10, DAY1))
    scan_table(settings, ident)
    first = submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False)
    assert first is not None
    out = actions.get_outcome(settings, first)
    assert out["kind"] == "merge" and out["trigger"] == "event"
    with session_scope(settings) as s:
        made = _decisions(s, table_id)[-1]
    assert made.event == "decision.made" and made.detail["reason"] == "above_threshold"
    [candidate] = made.detail["candidates"]
    assert candidate["kind"] == "merge" and candidate["cost"] > 0 and candidate["value"] > 0


def _decisions(session, table_id):
    from sqlalchemy import select

    from autooptimize.storage.models import AuditLog

    return list(session.scalars(select(AuditLog).where(
        AuditLog.table_id == table_id, AuditLog.event.in_(["decision.made", "decision.skipped"])
    ).order_by(AuditLog.id)))


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
    from autooptimize.services.observe.changes import stale_tables

    table = make_table(catalog, {DAY1: 2})
    ident = identifier(table)
    tracking.track(settings, ident)
    assert ident in stale_tables(settings)  # never observed
    scan_table(settings, ident)
    assert ident not in stale_tables(settings)
    assert ident in stale_tables(settings.model_copy(update={"rescan_after_seconds": -1}))


def test_whatif_simulates_settings_without_changing_anything(settings, catalog):

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


def test_min_interval_defers_a_new_action_on_a_recently_merged_partition(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    from sqlalchemy import select, update

    from autooptimize.storage.models import Action, AuditLog
    from autooptimize.storage.repositories import now

    table = make_table(catalog, {DAY1: 3})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", min_interval_seconds=3600)
    scan_table(settings, ident)
    with session_scope(settings) as s:
        table_id = tracked_table(s, settings.catalog, ident).id
    first = submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False)
    with session_scope(settings) as s:  # as if it merged a minute ago
        s.execute(update(Action).where(Action.id == first).values(state="succeeded", finished_at=now()))
    assert submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False) is None
    with session_scope(settings) as s:
        events = s.scalars(select(AuditLog).where(AuditLog.table_id == table_id,
                                                   AuditLog.event == "decision.deferred")).all()
    assert [e.detail["reason"] for e in events] == ["min_interval"]
    tracking.track(settings, ident, min_interval_seconds=0)
    assert submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False) is not None


def _table_id(settings, ident):
    with session_scope(settings) as s:
        return tracked_table(s, settings.catalog, ident).id


def test_a_delete_heavy_partition_gets_delete_compaction_and_explain_agrees(settings, catalog):
    from autooptimize.services.explain import explain
    from tests.integration.deletes import data_files, delete_positions

    table = make_table(catalog, {DAY1: 3}, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1KiB", tolerance="512B",
                   allowed_actions="merge,sort,compact_deletes")
    first = data_files(table, "day=2026-01-01")[0]
    delete_positions(table, {first: range(20)})  # 20 of 150 rows: delete-heavy
    scan_table(settings, ident)

    explained = explain(settings, ident)["partitions"][0]
    assert (explained["action"], explained["reason"]) == ("compact_deletes", "delete_heavy")
    assert {c["kind"] for c in explained["candidates"]} >= {"compact_deletes"}
    action_id = submit_for_partition(settings, _table_id(settings, ident), 0, key_of(DAY1), dispatch=False)
    assert actions.get_outcome(settings, action_id)["kind"] == "compact_deletes"


def test_deletes_block_merging_when_compaction_is_not_allowed(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    from autooptimize.services.explain import explain
    from tests.integration.deletes import data_files, delete_positions

    table = make_table(catalog, {DAY1: 4}, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", allowed_actions="merge")
    delete_positions(table, {data_files(table, "day=2026-01-01")[0]: [0]})
    scan_table(settings, ident)
    assert explain(settings, ident)["partitions"][0]["reason"] == "not_allowed"
    assert submit_for_partition(settings, _table_id(settings, ident), 0, key_of(DAY1), dispatch=False) is None


def test_an_unsorted_partition_with_a_sort_order_gets_a_sort(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    import pyarrow as pa

    from autooptimize.services.explain import explain
    from tests.integration.tables import ARROW, SCHEMA, SPEC

    table = catalog.create_table("test.decide_sort", schema=SCHEMA, partition_spec=SPEC)
    for k in range(6):  # every file spans the whole id range
        ids = [k + 6 * j for j in range(40)]
        table.append(pa.table({"id": ids, "day": [DAY1] * 40, "v": [str(i) for i in ids], "x": [0.0] * 40},
                              schema=ARROW))
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", sort_order="id",
                   allowed_actions="merge,sort,compact_deletes")
    scan_table(settings, ident)
    row = explain(settings, ident)["partitions"][0]
    assert (row["action"], row["reason"]) == ("sort", "unsorted"), row
    kinds = {c["kind"]: c for c in row["candidates"]}
    assert kinds["sort"]["value_per_byte"] > kinds["merge"]["value_per_byte"]
    action_id = submit_for_partition(settings, _table_id(settings, ident), 0, key_of(DAY1), dispatch=False)
    assert actions.get_outcome(settings, action_id)["kind"] == "sort"


def test_a_budget_too_small_for_any_group_is_reported(binpack_settings, catalog):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    from autooptimize.services.explain import explain

    table = make_table(catalog, {DAY1: 6}, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", max_bytes_per_action=1)
    scan_table(settings, ident)
    row = explain(settings, ident)["partitions"][0]
    assert (row["action"], row["reason"]) == ("none", "budget"), row


def test_the_listener_hands_over_a_partition_that_received_delete_files(settings, catalog):
    from autooptimize.services.observe.roll import observe_table
    from tests.integration.deletes import data_files, delete_positions

    table = make_table(catalog, {DAY1: 1}, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1KiB", tolerance="1KiB",
                   allowed_actions="merge,sort,compact_deletes")
    handed: list = []
    observe_table(settings, ident, on_attention=lambda *a: handed.append(a))
    assert handed == []  # one file, within tolerance: nothing to do
    delete_positions(table, {data_files(table)[0]: range(10)})
    report = observe_table(settings, ident, on_attention=lambda *a: handed.append(a))
    assert report.delete_partitions == [(0, key_of(DAY1))]
    table_id = _table_id(settings, ident)
    assert handed == [(table_id, 0, key_of(DAY1))]
    action_id = submit_for_partition(settings, table_id, 0, key_of(DAY1), dispatch=False)
    assert actions.get_outcome(settings, action_id)["kind"] == "compact_deletes"
