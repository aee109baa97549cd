"""The live-partition policy end to end: a partition being written waits; once cold it is judged again
and finished, without a new snapshot asking."""

from __future__ import annotations

import time

import pytest

from autooptimize.domain.policy import COLD_FLOOR_SECONDS
from autooptimize.errors import InvalidArgument
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.submit_decided import on_attention_handler, settled_partitions
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, PartitionStats
from tests.fakes import RecordingDispatch
from tests.integration.tables import DAY1, batch, identifier, key_of, make_table


def _tracked(live, catalog, name: str):
    """A table of three small files in one day, tracked and observed once: (table, table id, the
    recording dispatch, the decide handler, and ``mine()``: the recheck's hand-overs of this table)."""
    table = make_table(catalog, {DAY1: 3}, rows=10, name=name)
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(live, ident)
    port = RecordingDispatch()
    handler = on_attention_handler(live, port)
    observe_table(live, ident, on_attention=handler)

    def mine() -> list[tuple[int, int, str]]:
        return [p for p in settled_partitions(live) if p[0] == table_id]

    return table, table_id, port, handler, mine


def test_a_live_partition_waits_then_is_finished_once_cold(settings, catalog):
    live = settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 1.0,
                                     "cold_after_seconds": 3.0, "merge_fan_in": 8})
    table = make_table(catalog, {DAY1: 3}, rows=10, name="settle")
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB")
    port = RecordingDispatch()
    handler = on_attention_handler(live, port)
    observe_table(live, ident, on_attention=handler)
    assert [r["rule"] for r in explain(live, ident)["partitions"]] == ["live_wait"]
    # three files just written, fewer than fan_in (8) and not tiny against the partition's own bytes: wait
    assert port.tickets == []
    table_id = tracking.ensure_tracked(live, ident)
    assert settled_partitions(live) == [] or all(t != table_id for t, _, _ in settled_partitions(live))
    time.sleep(live.settle_seconds + 0.5)  # settled: judged again once (what it waited for may have changed)
    settled = [p for p in settled_partitions(live) if p[0] == table_id]
    assert settled == [(table_id, 0, key_of(DAY1))]
    for t, spec, key in settled:
        handler(t, spec, key)
    assert port.tickets == []  # nothing changed: it still waits
    assert [p for p in settled_partitions(live) if p[0] == table_id] == []  # and is not handed over again
    time.sleep(live.cold_after_seconds - live.settle_seconds)
    due = [p for p in settled_partitions(live) if p[0] == table_id]
    assert due == [(table_id, 0, key_of(DAY1))]
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["action"], row["files_replaced"]) == ("cold_finish", "merge", 3)
    for t, spec, key in due:
        handler(t, spec, key)
    assert len(port.tickets) == 1 and port.tickets[0].partition == key_of(DAY1)
    with session_scope(live) as session:
        action = session.get(Action, port.tickets[0].action_id)
        assert action.kind == "merge" and action.trigger == "event"
        # what prompted it: the partition's last writer commit (a replay borrows its timings from that)
        assert action.prompted_at is not None
        assert int(action.prompted_at.timestamp() * 1000) == table.refresh().current_snapshot().timestamp_ms
    # judged and submitted: not handed over again
    assert [p for p in settled_partitions(live) if p[0] == table_id] == []


def test_a_quiet_partition_is_judged_once_when_quiet_and_once_when_cold(settings, catalog):
    """With quiet merging on the partition is handed back once at its settle time and once at its cold
    time, not on every recheck while it stays quiet (it was, every settle time, until cold)."""
    live = settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 3.0,
                                     "cold_after_seconds": 12.0, "merge_fan_in": 8, "quiet_merge": True})
    table, table_id, port, handler, mine = _tracked(live, catalog, "settle_quiet")
    ident = identifier(table)
    assert port.tickets == [] and mine() == []  # written to: waits
    time.sleep(live.settle_seconds + 0.5)
    due = mine()
    assert due == [(table_id, 0, key_of(DAY1))]  # quiet now: judged again
    for t, spec, key in due:
        handler(t, spec, key)
    [ticket] = port.tickets  # the quiet merge of a small partition
    [row] = explain(live, ident)["partitions"]
    assert row["rule"] == "quiet_full"
    with session_scope(live) as session:  # as if it ran and found nothing left to do
        action = session.get(Action, ticket.action_id)
        action.state, action.finished_at = "skipped", action.created_at
    time.sleep(live.settle_seconds + 0.5)
    assert mine() == []  # quiet a settle time longer, unchanged since judged: not handed over again
    time.sleep(live.cold_after_seconds - 2 * live.settle_seconds)
    assert mine() == [(table_id, 0, key_of(DAY1))]  # cold now: judged once more


def test_a_partition_written_in_quick_succession_is_cold_after_its_own_gaps_not_the_tables(settings, catalog):
    """The listener keeps each partition's newest gaps between writes; the recheck, decide and the merge's
    own cold test all take the partition as cold after 4 × the longest of them (at least 5 s), long before
    the table's 60 s. With the factor off it stays live for the table's time."""
    live = settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 1.0,
                                     "cold_after_seconds": 60.0, "merge_fan_in": 8, "cold_gap_factor": 4.0})
    table = make_table(catalog, {DAY1: 1}, rows=10, name="settle_gaps")
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(live, ident)
    port = RecordingDispatch()
    handler = on_attention_handler(live, port)
    observe_table(live, ident, on_attention=handler)  # the first look scans: the write time, no gap yet
    for i in range(3):  # three writes about 0.3 s apart, each seen by the listener
        time.sleep(0.3)
        table.append(batch(1000 + 10 * i, 10))
        observe_table(live, ident, on_attention=handler)
    with session_scope(live) as session:
        [stats] = session.query(PartitionStats).filter_by(table_id=table_id).all()
        gaps = list(stats.write_gaps)
    assert len(gaps) == 3 and all(0.2 < g < 3.0 for g in gaps), gaps  # one per write after the first
    assert port.tickets == [] and [r["rule"] for r in explain(live, ident)["partitions"]] == ["live_wait"]

    def mine(s) -> list[tuple[int, int, str]]:
        return [p for p in settled_partitions(s) if p[0] == table_id]

    time.sleep(live.settle_seconds + 0.5)  # settled: judged once more; nothing changed, so it still waits
    assert mine(live) == [(table_id, 0, key_of(DAY1))]
    for t, spec, key in mine(live):
        handler(t, spec, key)
    assert port.tickets == [] and mine(live) == []
    time.sleep(COLD_FLOOR_SECONDS + 0.5)  # 4 × ~0.3 s is under the floor: cold 5 s after the last write
    off = live.model_copy(update={"cold_gap_factor": 0.0})
    assert mine(off) == [] and [r["rule"] for r in explain(off, ident)["partitions"]] == ["live_wait"]
    # the table's own factor wins over the service's: 0 keeps the table's 60 s, and a bad one is refused
    assert tracking.track(live, ident, cold_gap_factor=0)["cold_gap_factor"] == 0.0
    assert mine(live) == [] and [r["rule"] for r in explain(live, ident)["partitions"]] == ["live_wait"]
    with pytest.raises(InvalidArgument, match=r"cold_gap_factor must be a number from 0 \(off\) to 1000 \(got 'soon'\)"):
        tracking.track(live, ident, cold_gap_factor="soon")
    assert tracking.track(off, ident, cold_gap_factor=4)["cold_gap_factor"] == 4.0
    assert mine(off) == [(table_id, 0, key_of(DAY1))]
    due = mine(live)
    assert due == [(table_id, 0, key_of(DAY1))]
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["files_replaced"]) == ("cold_finish", 4)
    for t, spec, key in due:
        handler(t, spec, key)
    assert len(port.tickets) == 1  # judged cold and submitted: the merge finishes it
    assert mine(live) == []


def test_a_partition_written_while_its_merge_was_queued_is_still_finished_once_cold(settings, catalog):
    """A cold finish is queued; a late write lands before it runs (the listener does not hand a partition
    with a queued action over again), so the merge plans on a live partition and is skipped. The write
    changed the partition after its verdict: once cold again it is handed over and finished, as the
    simulator judges every written partition at its settle and cold moments (it was never handed over
    again, and kept its files: the AutoAnalyze live test ended with 14 files against 5 predicted)."""
    live = settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 1.0,
                                     "cold_after_seconds": 3.0, "merge_fan_in": 8, "cold_gap_factor": 0.0,
                                     "rewrite_engine": "local"})
    table, table_id, port, handler, mine = _tracked(live, catalog, "settle_late")
    ident = identifier(table)
    time.sleep(live.cold_after_seconds + 0.5)
    for t, spec, key in mine():  # the settle and cold moments have both passed: one hand-over, cold
        handler(t, spec, key)
    [ticket] = port.tickets
    table.append(batch(5000, 10))  # a late write while the cold finish is queued
    observe_table(live, ident, on_attention=handler)
    assert len(port.tickets) == 1  # not handed over: its merge is queued
    assert actions.execute(live, ticket.action_id, spark=None)["state"] == "skipped"  # live again: it waits
    assert len(table.refresh().inspect.files()) == 4
    assert mine() == []  # written a moment ago: neither settled nor cold yet
    time.sleep(live.cold_after_seconds + 0.5)
    due = mine()
    assert due == [(table_id, 0, key_of(DAY1))]  # cold again: handed over once more
    for t, spec, key in due:
        handler(t, spec, key)
    assert len(port.tickets) == 2
    assert actions.execute(live, port.tickets[1].action_id, spark=None)["state"] == "succeeded"
    assert len(table.refresh().inspect.files()) == 1
    observe_table(live, ident, on_attention=handler)
    assert mine() == []  # finished: not handed over again
