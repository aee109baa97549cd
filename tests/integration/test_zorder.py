"""The zorder action on real tables: rows and content unchanged, output files clustered on both key
columns (seen in their manifest bounds), nulls and strings in the keys, Spark's z-value equal to the
reference (autooptimize.domain.zorder), the action in the audit log, status, explain and decide."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from autooptimize.domain.zorder import z_value
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.commit import ACTION_KIND_PROPERTY
from autooptimize.services import actions, tracking, zorder
from autooptimize.services.explain import explain
from autooptimize.services.status import table_status
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit_events, get_action
from tests.integration.tables import identifier, live_files, second_reader_checksum

pytestmark = pytest.mark.spark

SCHEMA = Schema(
    NestedField(1, "a", LongType(), required=False),
    NestedField(2, "b", DoubleType(), required=False),
    NestedField(3, "s", StringType(), required=False),
    NestedField(4, "ts", TimestamptzType(), required=False),
)
ARROW = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.float64()), pa.field("s", pa.string()),
                   pa.field("ts", pa.timestamp("us", tz="UTC"))])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _random_rows(rng: random.Random, n: int) -> pa.Table:
    """Rows spread over the whole key space: every file's box covers nearly every other's."""
    a = [rng.randrange(-50_000, 50_000) if rng.random() > 0.03 else None for _ in range(n)]
    b = [rng.uniform(-1e3, 1e3) for _ in range(n)]
    # every value starts "customer-0": the code skips that shared prefix
    s = [None if rng.random() < 0.1 else f"customer-{rng.randrange(10**6):07d}" for _ in range(n)]
    ts = [T0 + dt.timedelta(seconds=rng.randrange(86_400 * 30)) for _ in range(n)]
    return pa.table({"a": a, "b": b, "s": s, "ts": ts}, schema=ARROW)


def _table(catalog, name: str, files: int = 16, rows: int = 2000):
    rng = random.Random(name)
    table = catalog.create_table(f"test.{name}", schema=SCHEMA)
    for _ in range(files):
        table.append(_random_rows(rng, rows))
    return table


def _data_files(table):
    table.refresh()
    return [t.file for t in table.scan().plan_files()]


def _clustering(table, names: str) -> tuple[float, list[float], float]:
    """From the files' manifest bounds on the two columns ``names``: the mean share of other files whose
    box meets a file's (a filter on both columns must read them all), each column's mean range per
    file as a share of the column's whole range, and the boxes' mean area share."""
    columns = zorder.parse_zorder_columns(table, names)
    files = _data_files(table)
    counts = zorder.overlap_counts(table, files, columns)
    spans = zorder.boxes(table, files, columns)
    assert all(box is not None for box in spans)
    lo = [min(box[i][0] for box in spans) for i in range(2)]
    hi = [max(box[i][1] for box in spans) for i in range(2)]
    shares = [[(box[i][1] - box[i][0]) / (hi[i] - lo[i]) for i in range(2)] for box in spans]
    per_column = [sum(s[i] for s in shares) / len(shares) for i in range(2)]
    area = sum(s[0] * s[1] for s in shares) / len(shares)
    return sum(counts) / (len(files) * (len(files) - 1)), per_column, area


def _run(settings, spark, table, **options):
    action_id = actions.submit(settings, identifier(table), kind="zorder", dispatch=False,
                               options=options or None)
    return action_id, actions.execute(settings, action_id, spark=spark)


# the default engine (numpy z-values on the executors, autooptimize/arrow/zorder.py) and Spark SQL's
# expression (spark_actors/zorder.py)
ENGINES = pytest.mark.parametrize("engine", ["spark", "spark_sql"])


@ENGINES
def test_zorder_on_two_columns_clusters_the_files_and_keeps_every_row(settings, spark, catalog, engine):
    table = _table(catalog, f"zorder_numbers_{engine}")
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="24KiB", zorder_columns="a, b")
    before, second = table_checksum(table), second_reader_checksum(table)
    met_before, ranges_before, area_before = _clustering(table, "a, b")
    assert met_before == 1.0 and min(ranges_before) > 0.95  # every random file spans the key space

    action_id, out = _run(settings, spark, table, engine=engine)

    assert out["state"] == "succeeded", out
    assert out["rows_in"] == out["rows_out"] == 16 * 2000
    assert out["checksum_in"] == out["checksum_out"]
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second
    assert out["files_out"] >= 12, out
    met_after, ranges_after, area_after = _clustering(table, "a, b")
    # clustered on both columns at once (a sort by a would leave every file spanning all of b), and a
    # filter on a and b meets a fraction of the files
    assert max(ranges_after) < 0.5 and area_after < 0.15 * area_before, (ranges_after, area_after)
    assert met_after < 0.5 * met_before, met_after
    assert table.current_snapshot().summary[ACTION_KIND_PROPERTY] == "zorder"
    with session_scope(settings) as session:
        events = [e.event for e in audit_events(session, action_id)]
    assert "action.succeeded" in events or any(e.endswith("succeeded") for e in events), events
    status = table_status(settings, ident)
    assert status["tuning"]["zorder_columns"] == "a, b"
    assert status["partitions"][0]["last_action"]["kind"] == "zorder"


@ENGINES
def test_z_values_equal_the_reference_with_nulls_strings_and_timestamps(settings, spark, catalog, engine):
    table = _table(catalog, f"zorder_strings_{engine}", files=6, rows=1500)
    tracking.track(settings, identifier(table), target_file_size="64KiB")
    before, second = table_checksum(table), second_reader_checksum(table)
    names = "s, ts, a"
    keys = zorder.group_keys(table, _data_files(table), zorder.parse_zorder_columns(table, names))
    assert keys[0].prefix == len("customer-0") and [k.bits for k in keys] == [21] * 3

    action_id, out = _run(settings, spark, table, zorder_columns=names, engine=engine)

    assert out["state"] == "succeeded", out
    assert table_checksum(table) == before and second_reader_checksum(table) == second
    with session_scope(settings) as session:
        engines = {g["engine"] for g in get_action(session, action_id).checkpoint["groups"]}
    assert engines == {engine}
    from pyspark.sql import functions as F

    from spark_actors.zorder import z_column

    paths = live_files(table)
    assert len(paths) == out["files_out"] >= 2
    rows = spark.read.parquet(*paths).select("s", F.unix_micros("ts").alias("us"), "a",
                                             z_column(keys).alias("z")).collect()
    ref = [z_value(keys, [r.s, r.us, r.a]) for r in rows]
    assert [r.z for r in rows] == ref
    assert any(r.s is None for r in rows) and any(r.a is None for r in rows)
    # each file is one stretch of the curve: sorted by z within, and files in z order do not interleave
    stretches = []
    for path in paths:
        part = pq.read_table(path.removeprefix("file://")).to_pylist()
        zs = [z_value(keys, [r["s"], int(r["ts"].timestamp() * 1_000_000) if r["ts"] else None, r["a"]])
              for r in part]
        assert zs == sorted(zs), f"{path} is not in z order"
        stretches.append((zs[0], zs[-1]))
    stretches.sort()
    assert all(a[1] <= b[0] for a, b in zip(stretches, stretches[1:], strict=False)), stretches
    # a null key is code 0, and only a null: the bits of s in Spark's z-value are all 0 exactly for nulls
    mask = sum(1 << (b * 3 + 2) for b in range(21))
    assert all((r.z & mask == 0) == (r.s is None) for r in rows)


def test_decide_offers_zorder_once_the_tuning_names_columns(settings, spark, catalog):
    table = _table(catalog, "zorder_decide", files=12, rows=300)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB", tolerance="256KiB")
    assert explain(settings, ident)["partitions"][0]["action"] == "merge"
    tracking.track(settings, ident, zorder_columns="b,a")
    row = explain(settings, ident)["partitions"][0]
    assert (row["action"], row["reason"]) == ("zorder", "unclustered"), row
    assert {c["kind"] for c in row["candidates"]} >= {"merge", "zorder"}


def test_bad_zorder_columns_are_refused_naming_what_is_valid(settings, spark, catalog):
    table = _table(catalog, "zorder_bad", files=3, rows=50)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    snapshot = table.current_snapshot().snapshot_id
    _, out = _run(settings, spark, table)
    assert out["state"] == "refused" and out["reason"] == "no_zorder_columns", out
    for columns, message in (("a", "2 to 4"), ("a,b,s,ts,a", "2 to 4"), ("a, nope", "not a top-level column"),
                             ("a, a", "twice")):
        with pytest.raises(InvalidArgument, match=message):
            actions.submit(settings, ident, kind="zorder", dispatch=False, options={"zorder_columns": columns})
    with pytest.raises(InvalidArgument, match="unknown option"):
        actions.submit(settings, ident, kind="zorder", dispatch=False, options={"sort_order": "a"})
    with pytest.raises(InvalidArgument, match="not a top-level column"):
        tracking.track(settings, ident, zorder_columns="a, missing")
    assert table.refresh().current_snapshot().snapshot_id == snapshot
