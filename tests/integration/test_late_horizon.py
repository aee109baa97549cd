"""The late-horizon finish end to end: the listener keeps each hour's ordinal and late lag, and an hour
further behind the newest than any write has reached back is handed to decide and finished at once,
long before its cold-after time (an hour here)."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import HourTransform
from pyiceberg.types import LongType, NestedField, TimestamptzType
from sqlalchemy import select, update

from autooptimize.domain.partitions import encode_key
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.observe.scan import scan_table
from autooptimize.services.submit_decided import on_attention_handler, settled_partitions
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import PartitionStats, SpecSpan
from tests.fakes import RecordingDispatch
from tests.integration.tables import identifier

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType(), required=True))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=HourTransform(), name="ts_hour"))
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False)])
BASE_HOUR = 493_000  # hours since 1970 (2026-03-28)
HOURS = 6


def _rows(first: int, hours: list[int]) -> pa.Table:
    ts = [dt.datetime.fromtimestamp((BASE_HOUR + h) * 3600 + i, dt.UTC) for i, h in enumerate(hours)]
    return pa.table({"id": list(range(first, first + len(hours))), "ts": ts}, schema=ARROW)


def _history(settings, catalog, name: str):  # type: ignore[no-untyped-def]
    """Two commits an hour for six hours; the first of each hour also brings a late row to the hour before
    (the table's late horizon: 1). Observed after every commit, as the listener does."""
    table = catalog.create_table(f"test.{name}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", merge_fan_in=8, cold_after_seconds=3600,
                   cold_gap_factor=0)
    port = RecordingDispatch()
    handler = on_attention_handler(settings, port)
    first = 0
    for hour in range(HOURS):
        for commit in range(2):
            rows = [hour] * 20 + ([hour - 1] * 5 if hour and not commit else [])
            table.append(_rows(first, rows))
            first += len(rows)
            observe_table(settings, ident, on_attention=handler)
    return ident, tracking.ensure_tracked(settings, ident), port, handler


def test_hours_past_the_late_horizon_are_finished_when_a_newer_hour_starts(settings, catalog):
    live = settings.model_copy(update={"merge_policy": "tiered", "rewrite_engine": "local"})
    ident, table_id, port, handler = _history(live, catalog, "late_horizon")
    with session_scope(live) as session:
        stats = {r.ordinal: r.late_lag for r in session.scalars(select(PartitionStats)
                                                                 .where(PartitionStats.table_id == table_id))}
    assert stats == {BASE_HOUR + h: (1 if h < HOURS - 1 else 0) for h in range(HOURS)}
    assert _span(live, table_id) == (BASE_HOUR + HOURS - 1, BASE_HOUR, 1)  # kept beside, for the recheck
    assert port.tickets == []  # three small files an hour, under the fan-in: every hour waits

    # horizon 1 over hours 0..5 (a span of 5 ≥ 1 + 3): hours 0..3 are past it, 4 and 5 may still be written
    past = [encode_key([BASE_HOUR + h]) for h in range(HOURS - 2)]
    rows = {r["partition_key"]: r["rule"] for r in explain(live, ident)["partitions"]}
    assert rows == {**{k: "cold_finish" for k in past},
                    **{encode_key([BASE_HOUR + h]): "live_wait" for h in (HOURS - 2, HOURS - 1)}}
    due = sorted(k for t, _, k in settled_partitions(live) if t == table_id)
    assert due == sorted(past)
    for key in due:
        handler(table_id, 0, key)
    assert sorted(t.partition for t in port.tickets) == sorted(past)
    assert [p for p in settled_partitions(live) if p[0] == table_id] == []  # handed over once

    result = actions.execute(live, port.tickets[0].action_id, spark=None)
    assert result["state"] == "succeeded"
    observe_table(live, ident)
    with session_scope(live) as session:
        row = session.scalars(select(PartitionStats).where(PartitionStats.table_id == table_id,
                                                            PartitionStats.partition_key == port.tickets[0].partition)).one()
        assert row.n_files == 1 and row.late_lag == 1  # finished; a merge is not a write
    assert _span(live, table_id) == (BASE_HOUR + HOURS - 1, BASE_HOUR, 1)
    scan_table(live, ident)  # a whole-table scan sets the span again from the partitions held
    assert _span(live, table_id) == (BASE_HOUR + HOURS - 1, BASE_HOUR, 1)
    with session_scope(live) as session:  # as if the table were dropped and made again: nothing known
        session.execute(update(PartitionStats).where(PartitionStats.table_id == table_id)
                        .values(ordinal=None, late_lag=None))
    scan_table(live, ident)
    with session_scope(live) as session:
        assert session.scalars(select(SpecSpan).where(SpecSpan.table_id == table_id)).all() == []


def _span(settings, table_id: int) -> tuple[int, int, int | None]:  # type: ignore[no-untyped-def]
    with session_scope(settings) as session:
        (span,) = session.scalars(select(SpecSpan).where(SpecSpan.table_id == table_id)).all()
        return span.newest, span.oldest, span.horizon


def test_off_the_hours_wait_for_their_cold_after_time(settings, catalog):
    live = settings.model_copy(update={"merge_policy": "tiered", "late_horizon_finish": False})
    ident, table_id, port, _ = _history(live, catalog, "late_horizon_off")
    assert {r["rule"] for r in explain(live, ident)["partitions"]} == {"live_wait"}
    assert [p for p in settled_partitions(live) if p[0] == table_id] == [] and port.tickets == []
