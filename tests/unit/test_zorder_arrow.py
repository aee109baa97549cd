"""autooptimize/arrow/zorder.py: the vectorised z-value equals autooptimize.domain.zorder.z_value row by
row (every key kind, nulls, 1 to 3 keys, degenerate bounds), and zorder_slices keeps every row once, in
z order, cut into files of disjoint z ranges."""

from __future__ import annotations

import math
import random
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autooptimize.arrow.zorder import z_values, zorder_slices
from autooptimize.domain.zorder import STRING_BYTES, ZKey, bits_per_column, key_for, z_value

# A column: (name, kind, arrow array, the values as the reference takes them: dates as days and
# timestamps as microseconds since 1970, decimals as Decimal, strings as str, binary as bytes).
Column = tuple[str, str, pa.Array, list[Any]]


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.15 else value


def _dec(unscaled: int, scale: int) -> Decimal:
    """``unscaled · 10^-scale`` exactly (Decimal arithmetic would round to 28 digits)."""
    return Decimal(f"{unscaled}E-{scale}")


def _ints(rng: random.Random, rows: int, lo: int, hi: int) -> list[int | None]:
    return [_maybe(rng, rng.randint(lo, hi)) for _ in range(rows)]


def _columns(rng: random.Random, rows: int) -> dict[str, Column]:
    """One column of every kind, seeded; the special values of each kind are mixed in."""
    longs = _ints(rng, rows, -(2**63), 2**63 - 1)  # beyond 2^53: float() rounds
    floats = [_maybe(rng, rng.choice([math.nan, math.inf, -math.inf, -0.0, 0.0, rng.uniform(-5, 5),
                                      rng.uniform(-1e6, 1e6)])) for _ in range(rows)]
    small_dec = [None if v is None else _dec(v, 2) for v in _ints(rng, rows, -99_999, 99_999)]
    big_dec = [None if v is None else _dec(v, 6)
               for v in _ints(rng, rows, -(10**38) + 1, 10**38 - 1)]  # beyond 2^53: the slow path
    days = _ints(rng, rows, -400, 30_000)
    micros = _ints(rng, rows, -(10**15), 10**16)
    bools = [_maybe(rng, rng.random() < 0.5) for _ in range(rows)]
    words = ["", "a", "ab", "zzzzzzzzzz", "päivä", "日本語テキスト", "\x00x", "éé", "abcdef", "abcdefg"]
    strings = [_maybe(rng, rng.choice(words)) for _ in range(rows)]
    prefixed = [_maybe(rng, "tenant-" + rng.choice(["", "ä", "0"]) + str(rng.randint(0, 10**12)))
                for _ in range(rows)]
    blobs = [_maybe(rng, bytes(rng.randrange(256) for _ in range(rng.randint(0, 9)))) for _ in range(rows)]
    return {
        "long": ("long", "number", pa.array(longs, pa.int64()), longs),
        "int": ("int", "number", pa.array([None if v is None else v % 1000 - 500 for v in days], pa.int32()),
                [None if v is None else v % 1000 - 500 for v in days]),
        "double": ("double", "number", pa.array(floats, pa.float64()), floats),
        "float": ("float", "number", pa.array(floats, pa.float32()),
                  [None if v is None else float(np.float32(v)) for v in floats]),
        "dec": ("dec", "number", pa.array(small_dec, pa.decimal128(9, 2)), small_dec),
        "bigdec": ("bigdec", "number", pa.array(big_dec, pa.decimal128(38, 6)), big_dec),
        "date": ("date", "date", pa.array(days, pa.int32()).cast(pa.date32()), days),
        "ts": ("ts", "timestamp", pa.array(micros, pa.int64()).cast(pa.timestamp("us")), micros),
        "tstz": ("tstz", "timestamp", pa.array(micros, pa.int64()).cast(pa.timestamp("us", "UTC")), micros),
        "bool": ("bool", "boolean", pa.array(bools, pa.bool_()), bools),
        "str": ("str", "string", pa.array(strings, pa.string()), strings),
        "prefixed": ("prefixed", "string", pa.array(prefixed, pa.large_string()), prefixed),
        "bin": ("bin", "binary", pa.array(blobs, pa.binary()), blobs),
    }


def _bounds(kind: str, values: list[Any]) -> tuple[Any, Any]:
    """The column's min and max (NaN left out, as Iceberg's bounds), as the files' bounds would give."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if kind == "string":  # Iceberg orders strings by their UTF-8 bytes
        return min(present, key=lambda s: s.encode()), max(present, key=lambda s: s.encode())
    return min(present), max(present)


def _reference(keys: list[ZKey], columns: list[Column]) -> list[int]:
    return [z_value(keys, list(row)) for row in zip(*(c[3] for c in columns), strict=True)]


def _check(keys: list[ZKey], columns: list[Column]) -> None:
    table = pa.table({c[0]: c[2] for c in columns})
    got = z_values(table, keys)
    assert got.dtype == np.int64
    assert got.tolist() == _reference(keys, columns)


RNG_COLUMNS = _columns(random.Random(20261124), 600)
KINDS = sorted(RNG_COLUMNS)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("bounds", ["data", "narrow", "none", "equal", "reversed"])
def test_one_key_of_each_kind(name: str, bounds: str) -> None:
    column = RNG_COLUMNS[name]
    low, high = _bounds(column[1], column[3])
    if bounds == "narrow":  # the middle of the data's range: values below and above clamp
        ordered = sorted({v for v in column[3] if v is not None and not (isinstance(v, float) and math.isnan(v))},
                         key=lambda v: v.encode() if isinstance(v, str) else v)
        low, high = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    for bits in (63, 31, 8):
        if bounds == "none":
            key = key_for(name, column[1], None, None, bits)
        elif bounds in ("equal", "reversed"):
            probe = key_for(name, column[1], low, high, bits)
            lo = probe.low if probe.low is not None else 0.0  # doubles: ±inf bounds give no key
            key = ZKey(name, column[1], lo, lo if bounds == "equal" else lo - 1.0, bits, probe.prefix)
        else:
            key = key_for(name, column[1], low, high, bits)
        _check([key], [column])


def test_a_shared_prefix_is_skipped_and_windows_are_cut() -> None:
    key = key_for("prefixed", "string", "tenant-0", "tenant-9", 31)
    assert key.prefix == len("tenant-") and len("tenant-123456789") > key.prefix + STRING_BYTES
    _check([key], [RNG_COLUMNS["prefixed"]])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [2, 3])
def test_several_keys_of_mixed_kinds(seed: int, k: int) -> None:
    rng = random.Random(seed)
    chosen = [RNG_COLUMNS[n] for n in rng.sample(KINDS, k)]
    bits = bits_per_column(k)
    keys = []
    for column in chosen:  # one key in three unbounded, as a group whose files lack bounds
        low, high = _bounds(column[1], column[3]) if rng.random() < 0.67 else (None, None)
        keys.append(key_for(column[0], column[1], low, high, bits))
    _check(keys, chosen)


def test_chunked_sliced_and_dictionary_columns() -> None:
    columns = [RNG_COLUMNS["str"], RNG_COLUMNS["dec"], RNG_COLUMNS["long"]]
    keys = [key_for(c[0], c[1], *_bounds(c[1], c[3]), 21) for c in columns]
    expected = _reference(keys, columns)
    table = pa.table({
        "str": pa.chunked_array([columns[0][2][:100].dictionary_encode(), columns[0][2][100:].dictionary_encode()]),
        "dec": pa.chunked_array([columns[1][2][:250], columns[1][2][250:]]),
        "long": pa.chunked_array([columns[2][2][:1], columns[2][2][1:]]),
    })
    assert z_values(table, keys).tolist() == expected
    window = table.slice(37, 200)  # arrays with a non-zero offset
    assert z_values(window, keys).tolist() == expected[37:237]
    as_views = table.set_column(0, "str", columns[0][2].cast(pa.string_view()))
    assert z_values(as_views, keys).tolist() == expected


def test_interleaving_by_hand() -> None:
    """Two keys of 2 bits: first key's bit leads each round. Codes 3 and 1 → 1 0 1 1, codes 1 and 3 → 0 1 1 1."""
    a, b = ZKey("a", "number", 0.0, 2.0, 2), ZKey("b", "number", 0.0, 2.0, 2)  # top 2: 0 → 1, 2 → 3
    table = pa.table({"a": pa.array([2, 0, None], pa.int64()), "b": pa.array([0, 2, 2], pa.int64())})
    assert z_values(table, [a, b]).tolist() == [0b1011, 0b0111, 0b0101]


def test_timestamps_of_other_units() -> None:
    micros = [-1_500_001, 0, 86_400_000_000, None]
    key = ZKey("t", "timestamp", -2e6, 1e8, 31)  # a microsecond is many codes wide
    expected = [z_value([key], [m]) for m in micros]
    for unit, factor in (("ms", 1000), ("s", 1_000_000)):
        whole = [None if m is None else m // factor * factor for m in micros]
        table = pa.table({"t": pa.array([None if m is None else m // factor for m in micros], pa.int64())
                          .cast(pa.timestamp(unit))})
        assert z_values(table, [key]).tolist() == [z_value([key], [m]) for m in whole]
    ns = pa.table({"t": pa.array([None if m is None else m * 1000 + 999 for m in micros], pa.int64())
                   .cast(pa.timestamp("ns"))})
    assert z_values(ns, [key]).tolist() == expected  # nanoseconds floor to the microsecond


_FINITE = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False)
_KIND_VALUES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "long": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "double": (pa.float64(), st.one_of(_FINITE, st.sampled_from([math.nan, math.inf, -math.inf]))),
    "dec": (pa.decimal128(38, 10), st.integers(-(10**38) + 1, 10**38 - 1).map(lambda u: _dec(u, 10))),
    "dec2": (pa.decimal128(18, 2), st.integers(-(10**18) + 1, 10**18 - 1).map(lambda u: _dec(u, 2))),
    "string": (pa.string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "boolean": (pa.bool_(), st.booleans()),
}
_KIND_OF = {"long": "number", "double": "number", "dec": "number", "dec2": "number"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_columns_and_bounds(data: st.DataObject) -> None:
    k = data.draw(st.integers(1, 3))
    bits = 63 if k == 1 else bits_per_column(k)
    columns: list[Column] = []
    keys: list[ZKey] = []
    for i in range(k):
        name = data.draw(st.sampled_from(sorted(_KIND_VALUES)))
        arrow_type, values = _KIND_VALUES[name]
        kind = _KIND_OF.get(name, name)
        rows = data.draw(st.lists(st.none() | values, min_size=1, max_size=40))
        low, high = data.draw(st.tuples(values, values))  # bounds unrelated to the rows: clamping too
        if kind == "string":
            low, high = sorted((low, high), key=lambda s: s.encode())
        elif not (isinstance(low, float) and math.isnan(low)) and not (isinstance(high, float) and math.isnan(high)):
            low, high = min(low, high), max(low, high)
        columns.append((f"c{i}", kind, pa.array(rows, arrow_type), rows))
        keys.append(key_for(f"c{i}", kind, low, high, bits))
    n = min(len(c[3]) for c in columns)
    columns = [(c[0], c[1], c[2][:n], c[3][:n]) for c in columns]
    _check(keys, columns)


# -- zorder_slices ---------------------------------------------------------------------------------

def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


SLICE_COLUMNS = [RNG_COLUMNS["long"], RNG_COLUMNS["str"], RNG_COLUMNS["date"]]
SLICE_TABLE = pa.table({c[0]: c[2] for c in SLICE_COLUMNS} | {"payload": pa.array(range(600))})
SLICE_KEYS = [key_for(c[0], c[1], *_bounds(c[1], c[3]), 21) for c in SLICE_COLUMNS]


@pytest.mark.parametrize("files_out", [1, 2, 3, 7, 600, 1000])
def test_slices_keep_every_row_in_z_order(files_out: int) -> None:
    pieces = zorder_slices(SLICE_TABLE, SLICE_KEYS, files_out)
    assert 1 <= len(pieces) <= files_out
    assert all(p.schema == SLICE_TABLE.schema for p in pieces)  # the input's columns, no z column
    joined = pa.concat_tables(pieces)
    assert _rows(joined) == _rows(SLICE_TABLE)
    z = z_values(joined, SLICE_KEYS)
    assert (np.diff(z) >= 0).all()
    sizes = [p.num_rows for p in pieces]
    for left, right in zip(pieces, pieces[1:], strict=False):  # disjoint z ranges
        assert z_values(left, SLICE_KEYS).max() < z_values(right, SLICE_KEYS).min()
    if files_out <= 7:  # 600 rows of mostly distinct z-values: near-equal slices
        assert len(pieces) == files_out and max(sizes) - min(sizes) <= 0.1 * 600 / files_out + 2


def test_equal_z_values_are_never_split() -> None:
    keys = [ZKey("g", "number", 0.0, 3.0, 31), ZKey("payload", "number", None, None, 31)]
    table = pa.table({"g": pa.array([i % 4 for i in range(400)], pa.int64()), "payload": pa.array(range(400))})
    pieces = zorder_slices(table, keys, 10)
    assert [sorted(set(p.column("g").to_pylist())) for p in pieces] == [[0], [1], [2], [3]]
    assert [p.column("payload").to_pylist() for p in pieces][0] == list(range(0, 400, 4))  # stable


def test_empty_table() -> None:
    empty = SLICE_TABLE.slice(0, 0)
    assert z_values(empty, SLICE_KEYS).tolist() == []
    assert [p.num_rows for p in zorder_slices(empty, SLICE_KEYS, 4)] == [0]
