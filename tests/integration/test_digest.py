"""The Spark and the pyarrow implementations of the one content digest agree, value for value."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autooptimize.engines.digest import arrow_digest, spark_digest, spark_digest_columns

pytestmark = pytest.mark.spark

UTC = dt.UTC


def _every_type() -> pa.Table:
    n = None
    return pa.table({
        "tiny": pa.array([1, -128, n, 127, 0], pa.int8()),
        "small": pa.array([1, -32768, n, 7, 0], pa.int16()),
        "i": pa.array([0, -1, n, 2**31 - 1, -(2**31)], pa.int32()),
        "l": pa.array([0, -1, n, 2**63 - 1, -(2**63)], pa.int64()),
        "f": pa.array([1.5, -0.0, n, math.nan, math.inf], pa.float32()),
        "d": pa.array([1.5, -0.0, n, math.nan, -math.inf], pa.float64()),
        "dec": pa.array([Decimal("1.25"), Decimal("-0.01"), n, Decimal("99999999.99"), Decimal("0")],
                        pa.decimal128(10, 2)),
        "dec18": pa.array([Decimal("-1"), Decimal("123456789012345678"), n, Decimal("0"), Decimal("1")],
                          pa.decimal128(18, 0)),
        "wide": pa.array([Decimal("1.5"), Decimal("-1.5"), n, Decimal("-12345678901234567890123.4567"),
                          Decimal("0.0001")], pa.decimal128(38, 4)),
        "s": pa.array(["", "héllo ✓ 𝄞", n, "x" * 70, "a,b|c"], pa.string()),
        "s2": pa.array([n, "", "moved", n, "𝄞" * 9], pa.string()),
        "b": pa.array([b"", b"\x00\xff", n, bytes(range(40)), b"z"], pa.binary()),
        "flag": pa.array([True, False, n, True, False]),
        "day": pa.array([dt.date(1970, 1, 1), dt.date(1900, 2, 28), n, dt.date(2262, 4, 11), dt.date(2024, 2, 29)]),
        "ts": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 1, UTC), dt.datetime(1960, 1, 1, tzinfo=UTC), n,
                        dt.datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC)],
                       pa.timestamp("us", "UTC")),
        "ntz": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 999999), n, n, dt.datetime(1969, 12, 31, 23, 59, 59),
                         dt.datetime(2000, 1, 1)], pa.timestamp("us")),
        "nested": pa.array([{"x": 1, "y": "a"}, {"x": n, "y": "b"}, n, {"x": 3, "y": n}, {"x": n, "y": n}],
                           pa.struct([("x", pa.int64()), ("y", pa.string())])),
    })


def _spark_side(spark, path: str):
    df = spark.read.parquet(path)
    return spark_digest(df.agg(*spark_digest_columns(df)).collect()[0])


def test_spark_and_arrow_digests_agree_on_every_type(spark, tmp_path) -> None:
    table = _every_type()
    path = str(tmp_path / "every.parquet")
    pq.write_table(table, path)
    assert _spark_side(spark, path) == arrow_digest(pq.read_table(path)) == arrow_digest(table)
    for name in table.column_names:  # one column at a time, so a disagreement names its type
        one = str(tmp_path / f"{name}.parquet")
        pq.write_table(table.select([name]), one)
        assert _spark_side(spark, one) == arrow_digest(table.select([name])), name


def test_spark_sees_a_value_moved_into_the_adjacent_null_column(spark, tmp_path) -> None:
    before = pa.table({"a": pa.array([1, None], pa.int64()), "b": pa.array([None, 2], pa.int64())})
    after = pa.table({"a": pa.array([None, None], pa.int64()), "b": pa.array([1, 2], pa.int64())})
    digests = []
    for name, table in (("before", before), ("after", after)):
        pq.write_table(table, str(tmp_path / f"{name}.parquet"))
        digests.append(_spark_side(spark, str(tmp_path / f"{name}.parquet")))
    assert digests[0] != digests[1]
    assert digests == [arrow_digest(before), arrow_digest(after)]
