"""Every partition transform, end to end: listener → decide → merge → status → optimize --partition.

The partition travels inside the service as its Iceberg values; its human form is printed by status
and read back by the CLI. Rows and content checksum stay equal to everything written.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestampType

from autooptimize.cli import main as cli_main
from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.services import actions, tracking
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.status import table_status
from autooptimize.services.submit_decided import on_attention_handler
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog
from tests.fakes import RecordingDispatch

pytestmark = pytest.mark.spark

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestampType(), required=False),
                NestedField(3, "name", StringType(), required=False), NestedField(4, "n", IntegerType(), required=False))
ARROW = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us")), pa.field("name", pa.string()),
                   pa.field("n", pa.int32())])
TS = dt.datetime(2024, 6, 1, 12, 15)
_ids = itertools.count(1)
_tables = itertools.count()


def _spec(*fields: tuple[int, object, str]) -> PartitionSpec:
    return PartitionSpec(*[PartitionField(src, 1000 + i, t, name) for i, (src, t, name) in enumerate(fields)])


CASES = {
    "hour": (_spec((2, HourTransform(), "ts_hour")), {"name": "x"}, "ts_hour=2024-06-01-12"),
    "day": (_spec((2, DayTransform(), "ts_day")), {"name": "x"}, "ts_day=2024-06-01"),
    "month": (_spec((2, MonthTransform(), "ts_month")), {"name": "x"}, "ts_month=2024-06"),
    "year": (_spec((2, YearTransform(), "ts_year")), {"name": "x"}, "ts_year=2024"),
    "bucket": (_spec((4, BucketTransform(16), "n_bucket")), {"name": "x"}, None),
    "truncate": (_spec((3, TruncateTransform(2), "name_trunc")), {"name": "abcdef"}, "name_trunc=ab"),
    "identity-separators": (_spec((3, IdentityTransform(), "name")), {"name": "a,b/c=d ünï"}, None),
    "identity-null": (_spec((3, IdentityTransform(), "name")), {"name": None}, "name=null"),
    "identity-empty": (_spec((3, IdentityTransform(), "name")), {"name": ""}, "name="),
    "void": (_spec((4, VoidTransform(), "n_void")), {"name": "x"}, "n_void=null"),
    "two-fields": (_spec((2, DayTransform(), "ts_day"), (4, BucketTransform(4), "n_bucket")), {"name": "x"}, None),
}


def _batch(rows: int, name: str | None) -> pa.Table:
    ids = [next(_ids) for _ in range(rows)]
    return pa.table({"id": ids, "ts": [TS + dt.timedelta(seconds=i) for i in range(rows)], "name": [name] * rows,
                     "n": [7] * rows}, schema=ARROW)


def _failures(settings) -> list[str]:
    with session_scope(settings) as session:
        return [str(r.detail) for r in session.query(AuditLog).filter(AuditLog.event == "decision.failed")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_transform_round_trips_listener_decide_merge_status_and_cli(case, binpack_settings, spark, catalog, capsys):
    settings = binpack_settings  # asserts a bin-packing plan (conftest)
    spec, columns, printed = CASES[case]
    ident = f"test.transform_{case.replace('-', '_')}_{next(_tables)}"
    table = catalog.create_table(ident, schema=SCHEMA, partition_spec=spec)
    written = []
    for _ in range(4):
        written.append(_batch(5, columns["name"]))
        table.append(written[-1])
    tracking.track(settings, ident, target_file_size="1MiB")
    failures_before = _failures(settings)

    # listener → decide → submit (the partition travels as its Iceberg values)
    dispatch = RecordingDispatch()
    observe_table(settings, ident, on_attention=on_attention_handler(settings, dispatch))
    assert _failures(settings) == failures_before, "decide failed on the partition value"
    assert len(dispatch.tickets) == 1, dispatch.tickets
    out = actions.execute(settings, dispatch.tickets[0].action_id, spark=spark)
    assert out["state"] == "succeeded" and (out["files_in"], out["files_out"]) == (4, 1), out["error"]
    assert out["rows_in"] == out["rows_out"] == 20 and out["checksum_in"] == out["checksum_out"]

    # status prints the human form; the CLI accepts exactly that
    status = table_status(settings, ident)
    assert len(status["partitions"]) == 1
    shown = status["partitions"][0]["partition"]
    if printed is not None:
        assert shown == printed
    for _ in range(2):
        written.append(_batch(5, columns["name"]))
        table.append(written[-1])
    code = cli_main(["optimize", ident, "--partition", shown, "--dry-run", "--json"])
    report = capsys.readouterr()
    assert code == 0, report.err
    planned = json.loads(report.out)
    assert planned["state"] == "skipped" and planned["reason"] == "dry_run", planned
    assert planned["plan"]["partitions"][0]["files_in"] == 3  # the merged file and the two new ones

    action_id = actions.submit(settings, ident, partition=shown)
    out = actions.execute(settings, action_id, spark=spark)
    assert out["state"] == "succeeded" and out["files_out"] == 1, out
    table.refresh()
    assert table_checksum(table) == arrow_checksum(pa.concat_tables(written))
