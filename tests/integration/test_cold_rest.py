"""A small partition gone cold early by its own gaps, then reached by late trickles, end to end: only the
trickles merge while the partition's big file waits for the table's cold-after time, and then one finish
takes them all (domain.cold: cold_rest, cold_wait, cold_finish)."""

from __future__ import annotations

import time

from sqlalchemy import select

from autooptimize.domain.policy import COLD_FLOOR_SECONDS
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.submit_decided import on_attention_handler, settled_partitions
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import PartitionStats
from tests.fakes import RecordingDispatch
from tests.integration.tables import (
    DAY1,
    batch,
    identifier,
    key_of,
    live_files,
    make_table,
    second_reader_checksum,
)

TABLE_COLD_SECONDS = 12.0


def _sizes(table) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {t.file.file_path: t.file.file_size_in_bytes for t in table.scan().plan_files()}


def test_late_trickles_merge_beside_the_big_file_until_the_tables_cold_after_time(settings, catalog):
    live = settings.model_copy(update={"merge_policy": "tiered", "rewrite_engine": "local", "settle_seconds": 1.0,
                                     "cold_after_seconds": TABLE_COLD_SECONDS, "merge_fan_in": 8,
                                     "cold_gap_factor": 4.0})
    table = make_table(catalog, {DAY1: 1}, rows=20_000, name="cold_rest")  # the big file: far under the 1 MiB target
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB")
    table_id = tracking.ensure_tracked(live, ident)
    port = RecordingDispatch()
    handler = on_attention_handler(live, port)
    observe_table(live, ident, on_attention=handler)
    for i in range(3):  # three late trickles about 0.3 s apart, each seen by the listener
        time.sleep(0.3)
        table.append(batch(10_000 + 10 * i, 10))
        observe_table(live, ident, on_attention=handler)
    before = second_reader_checksum(table)
    assert port.tickets == [] and [r["rule"] for r in explain(live, ident)["partitions"]] == ["live_wait"]

    def mine() -> list[tuple[int, int, str]]:
        return [p for p in settled_partitions(live) if p[0] == table_id]

    time.sleep(COLD_FLOOR_SECONDS + 0.5)  # cold by its own gaps (4 × ~0.3 s, at least 5 s), not the table's 12 s
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["action"], row["files_replaced"]) == ("cold_rest", "merge", 3)
    for t, spec, key in mine():
        handler(t, spec, key)
    [ticket] = port.tickets
    big = max(_sizes(table).items(), key=lambda kv: kv[1])[0]
    assert actions.execute(live, ticket.action_id, spark=None)["state"] == "succeeded"
    table = catalog.load_table(ident)
    assert len(live_files(table)) == 2 and big in live_files(table)  # the big file waits
    observe_table(live, ident, on_attention=handler)  # the merge is seen: judged again, and it waits
    assert len(port.tickets) == 1
    assert [r["rule"] for r in explain(live, ident)["partitions"]] == ["cold_wait"]
    assert mine() == []
    with session_scope(live) as session:
        stats = session.scalars(select(PartitionStats).where(PartitionStats.table_id == table_id)).one()
        assert stats.last_decision == "skip:live_wait"  # a wait: handed over again at the table's time

    last_write = stats.last_write_at.timestamp()
    time.sleep(max(0.0, last_write + TABLE_COLD_SECONDS + 0.5 - time.time()))
    due = mine()
    assert due == [(table_id, 0, key_of(DAY1))]
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["files_replaced"]) == ("cold_finish", 2)
    for t, spec, key in due:
        handler(t, spec, key)
    assert len(port.tickets) == 2
    assert actions.execute(live, port.tickets[1].action_id, spark=None)["state"] == "succeeded"
    table = catalog.load_table(ident)
    assert len(live_files(table)) == 1 and second_reader_checksum(table) == before


def test_without_a_dominant_file_the_early_cold_finishes_everything(settings, catalog):
    """Files of about one size: nothing dominates, so the early cold finish is the cold finish as before."""
    live = settings.model_copy(update={"merge_policy": "tiered", "settle_seconds": 1.0,
                                     "cold_after_seconds": TABLE_COLD_SECONDS, "merge_fan_in": 8,
                                     "cold_gap_factor": 4.0})
    table = make_table(catalog, {DAY1: 1}, rows=10, name="cold_even")
    ident = identifier(table)
    tracking.track(live, ident, target_file_size="1MiB")
    observe_table(live, ident)
    for i in range(3):
        time.sleep(0.3)
        table.append(batch(10_000 + 10 * i, 10))
        observe_table(live, ident)
    time.sleep(COLD_FLOOR_SECONDS + 0.5)
    [row] = explain(live, ident)["partitions"]
    assert (row["rule"], row["files_replaced"]) == ("cold_finish", 4)
