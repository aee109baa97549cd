"""The pyarrow side of the one content digest (autooptimize/engines/digest.py)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from autooptimize.engines.digest import EMPTY_DIGEST, DigestAccumulator, arrow_digest
from autooptimize.engines.xxh64 import hash_bytes, hash_int, hash_long


@pytest.mark.parametrize(("data", "seed", "expected"), [
    (b"", 0, 0xEF46DB3751D8E999),
    (b"abc", 0, 0x44BC2CF5AD770999),
    (b"abc", 42, 0x13C1D910702770E6),
    (bytes(range(100)), 42, 0x819D2B726001D507),
    ("héllo wörld, ünïcode ✓".encode(), 7, 0x8212081C96A46992),
])
def test_xxh64_matches_the_reference(data: bytes, seed: int, expected: int) -> None:
    buffer = np.frombuffer(b"pad" + data, np.uint8)
    got = hash_bytes(buffer, np.array([3]), np.array([len(data)]), np.array([seed], np.uint64))
    assert int(got[0]) == expected


def test_fixed_width_hashes_equal_the_hash_of_their_bytes() -> None:
    seeds = np.full(3, 42, np.uint64)
    ints, longs = np.array([0, -1, 2**31 - 1]), np.array([0, -1, 2**63 - 1])
    as_bytes = [np.frombuffer(a.astype(f"<i{w}").tobytes(), np.uint8) for a, w in ((ints, 4), (longs, 8))]
    assert (hash_int(ints, seeds) == hash_bytes(as_bytes[0], np.arange(3) * 4, np.full(3, 4), seeds)).all()
    assert (hash_long(longs, seeds) == hash_bytes(as_bytes[1], np.arange(3) * 8, np.full(3, 8), seeds)).all()


def test_a_value_moved_into_the_adjacent_null_column_changes_the_digest() -> None:
    before = pa.table({"a": pa.array([1, None], pa.int64()), "b": pa.array([None, 2], pa.int64())})
    after = pa.table({"a": pa.array([None, None], pa.int64()), "b": pa.array([1, 2], pa.int64())})
    assert arrow_digest(before) != arrow_digest(after)
    strings = pa.table({"a": ["x", None], "b": [None, "y"]})
    moved = pa.table({"a": pa.array(["x", "y"]), "b": pa.array([None, None], pa.string())})
    assert arrow_digest(strings) != arrow_digest(moved)


def test_row_order_and_batching_do_not_matter() -> None:
    table = pa.table({"a": [1, 2, 3, None], "b": ["x", "y", None, "z"]})
    shuffled = table.take([3, 1, 0, 2])
    assert arrow_digest(table) == arrow_digest(shuffled)
    parts = DigestAccumulator()
    parts.add(table.slice(0, 1))
    parts.add(table.slice(1).to_batches()[0])
    assert parts.digest == arrow_digest(table)


def test_column_order_matters() -> None:
    table = pa.table({"a": [1, 2], "b": [3, 4]})
    swapped = pa.table({"b": [3, 4], "a": [1, 2]})
    assert arrow_digest(table) != arrow_digest(swapped)


def test_the_digest_of_a_union_is_the_sum_of_the_parts() -> None:
    table = pa.table({"a": list(range(50)), "s": [str(i) * i for i in range(50)]})
    whole, one, two = arrow_digest(table), arrow_digest(table.slice(0, 20)), arrow_digest(table.slice(20))
    fields = [[int(x, 16) for x in d.checksum.split(":")] for d in (whole, one, two)]
    assert fields[0] == [a + b for a, b in zip(fields[1], fields[2], strict=True)]
    assert arrow_digest(table.slice(0, 0)) == EMPTY_DIGEST
    assert EMPTY_DIGEST.checksum == "0:0:0"


def test_equal_values_in_other_physical_forms_give_the_same_digest() -> None:
    plain = pa.table({"s": pa.array(["a", "bé", None], pa.string()), "d": pa.array([1.5, -0.0, math.nan])})
    large = pa.table({"s": pa.array(["a", "bé", None], pa.large_string()), "d": pa.array([1.5, 0.0, -math.nan])})
    assert arrow_digest(plain) == arrow_digest(large)
    dictionary = pa.table({"s": pa.array(["a", "bé", None]).dictionary_encode(), "d": plain["d"]})
    assert arrow_digest(dictionary) == arrow_digest(plain)


def test_every_type_changes_the_digest_when_a_value_changes() -> None:
    columns = {
        "i": (pa.array([1, None], pa.int32()), pa.array([2, None], pa.int32())),
        "f": (pa.array([1.0, None], pa.float32()), pa.array([1.5, None], pa.float32())),
        "dec": (pa.array([Decimal("1.10"), None], pa.decimal128(10, 2)),
                pa.array([Decimal("1.11"), None], pa.decimal128(10, 2))),
        "wide": (pa.array([Decimal("-1"), None], pa.decimal128(38, 0)),
                 pa.array([Decimal("-2"), None], pa.decimal128(38, 0))),
        "bin": (pa.array([b"\x00", None], pa.binary()), pa.array([b"\x00\x00", None], pa.binary())),
        "flag": (pa.array([True, None]), pa.array([False, None])),
        "day": (pa.array([dt.date(2024, 1, 1), None]), pa.array([dt.date(2024, 1, 2), None])),
        "ts": (pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us", "UTC")),
               pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1), None], pa.timestamp("us", "UTC"))),
        "list": (pa.array([[1, None], None]), pa.array([[None, 1], None])),
        "struct": (pa.array([{"x": 1, "y": None}, None]), pa.array([{"x": None, "y": 1}, None])),
    }
    for name, (one, other) in columns.items():
        assert arrow_digest(pa.table({name: one})) != arrow_digest(pa.table({name: other})), name


def test_map_entry_order_does_not_matter() -> None:
    t = pa.map_(pa.string(), pa.int64())
    one = pa.table({"m": pa.array([[("a", 1), ("b", 2)]], t)})
    other = pa.table({"m": pa.array([[("b", 2), ("a", 1)]], t)})
    assert arrow_digest(one) == arrow_digest(other)
