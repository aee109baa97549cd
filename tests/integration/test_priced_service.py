"""The priced live rule in the service: ``track --merge-price`` turns it on per table; the listener's spans
tell decide and ``explain`` which hour is the newest; a filled merge runs and commits; bad prices are
refused and change nothing."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import HourTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType
from sqlalchemy import select

from autooptimize.domain.partitions import encode_key
from autooptimize.domain.policy import expected_partition_bytes
from autooptimize.errors import InvalidArgument
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.submit_decided import on_attention_handler
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, PartitionStats
from autooptimize.storage.stats import median_partition_bytes
from autooptimize.storage.write_clock import medians_without_each
from tests.fakes import RecordingDispatch
from tests.integration.tables import identifier

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType(), required=True),
                NestedField(3, "payload", StringType(), required=True))
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=HourTransform(), name="ts_hour"))
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
                   pa.field("payload", pa.string(), nullable=False)])
BASE_HOUR = 493_100
TARGET = 256 * 1024


def _append(table, first: int, hour: int, payload: int) -> None:  # type: ignore[no-untyped-def]
    """One commit: one row in ``hour`` whose payload is ``payload`` random bytes as hex (a file of about
    ``payload`` bytes: hex compresses to half), one file."""
    ts = dt.datetime.fromtimestamp((BASE_HOUR + hour) * 3600 + first, dt.UTC)
    table.append(pa.table({"id": [first], "ts": [ts], "payload": [os.urandom(payload).hex()]}, schema=ARROW))


def _history(settings, catalog, name: str, price: int):  # type: ignore[no-untyped-def]
    """Hour 0 gets ten files of about 32 KiB (more than a 256 KiB target in all), then hour 1 three of about
    16 KiB. Observed after each commit, as the listener does."""
    table = catalog.create_table(f"test.{name}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size=TARGET, merge_price=price, cold_after_seconds=3600,
                   cold_gap_factor=0)
    port = RecordingDispatch()
    handler = on_attention_handler(settings, port)
    for i, (hour, payload) in enumerate([(0, 32 * 1024)] * 10 + [(1, 16 * 1024)] * 3):
        _append(table, i, hour, payload)
        observe_table(settings, ident, on_attention=handler)
    return ident, tracking.ensure_tracked(settings, ident), port


def _rules(settings, ident: str) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return {h: r["rule"] for r in explain(settings, ident)["partitions"]
            for h in (0, 1) if r["partition_key"] == encode_key([BASE_HOUR + h])}


def test_a_priced_table_fills_the_hour_behind_and_waits_in_the_newest(settings, catalog):
    live = settings.model_copy(update={"merge_policy": "tiered", "rewrite_engine": "local"})
    ident, table_id, port = _history(live, catalog, "priced", price=1000)
    assert tracking.track(live, ident)["merge_price"] == 1000
    # hour 1 has 48 KiB of its own, but the table's history (hour 0) says an hour fills a target
    assert _rules(live, ident) == {0: "filled", 1: "priced_wait"}
    with session_scope(live) as session:
        verdict = session.scalars(select(PartitionStats.last_decision).where(
            PartitionStats.table_id == table_id, PartitionStats.partition_key == encode_key([BASE_HOUR + 1]))).one()
    assert verdict == "skip:live_wait"  # judged again as a live wait is, once quiet or cold

    merges = [t for t in port.tickets if t.partition == encode_key([BASE_HOUR])]
    assert len(merges) == 1  # filled once its small files weighed 7/8 of the target; busy after
    result = actions.execute(live, merges[0].action_id, spark=None)
    assert result["state"] == "succeeded"
    with session_scope(live) as session:
        action = session.get(Action, merges[0].action_id)
        assert action is not None
        assert [p["rule"] for p in action.plan["partitions"]] == ["filled"]
        assert action.files_in >= 7 and action.files_out == 1 and action.rows_in == action.rows_out
    observe_table(live, ident)
    with session_scope(live) as session:
        row = session.scalars(select(PartitionStats).where(
            PartitionStats.table_id == table_id, PartitionStats.partition_key == encode_key([BASE_HOUR]))).one()
        assert row.n_files == 10 - action.files_in + 1

    # a price of 1 makes the newest hour's small files worth merging, once six of them have gathered
    # (NEWEST_MIN_FILES); 0 is the tiers again
    tracking.track(live, ident, merge_price=1)
    assert _rules(live, ident)[1] == "priced_wait"  # three
    table = catalog.load_table(ident)
    for i in range(3):
        _append(table, 100 + i, 1, 16 * 1024)
    observe_table(live, ident)
    assert _rules(live, ident)[1] == "priced"  # six
    tracking.track(live, ident, merge_price=0)
    assert set(_rules(live, ident).values()) <= {"tiered", "live_wait", "below_excess"}


def test_a_nonsense_price_is_refused_and_changes_nothing(settings, catalog):
    table = catalog.create_table(f"test.priced_bad_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    tracking.track(settings, ident, merge_price=24)
    for bad in (-1, "cheap", 2_000_000, True):
        with pytest.raises(InvalidArgument, match=r"merge_price must be a whole number from 0 to 1000000"):
            tracking.track(settings, ident, merge_price=bad)
    assert tracking.track(settings, ident)["merge_price"] == 24


def test_explain_takes_each_partitions_expected_bytes_as_decide_does(settings, catalog):
    ident, table_id, _ = _history(settings, catalog, "priced_medians", price=0)
    table = catalog.load_table(ident)
    for i, hour in enumerate((2, 2, 3, 5)):  # five hours of different sizes: odd and even counts of others
        _append(table, 100 + i, hour, 8 * 1024 * (i + 1))
        observe_table(settings, ident)
        with session_scope(settings) as session:
            held = {(r.spec_id, r.partition_key): int(r.total_bytes) for r in session.scalars(
                select(PartitionStats).where(PartitionStats.table_id == table_id, PartitionStats.n_files > 0))}
            # no target: the median of the others; hour 0 alone holds TARGET or more; 40 KiB: hours 0 and 1
            # (and, later, none or some of the others); 1 GB: none, so again the median of the others
            for target in (None, TARGET, 40 * 1024, 1 << 30):
                each = medians_without_each(session, table_id, target)
                assert len(each) >= 3
                for key in each:
                    assert each[key] == median_partition_bytes(session, table_id, key, target), (key, target)
                    others = [b for k, b in held.items() if k != key]
                    assert each[key] == expected_partition_bytes(others, target or 1 << 62), (key, target)
            full = [k for k, b in held.items() if b >= TARGET]
            assert len(full) == 1  # hour 0: every other hour is expected to hold what it holds
            assert {v for k, v in medians_without_each(session, table_id, TARGET).items() if k != full[0]} == {held[full[0]]}
