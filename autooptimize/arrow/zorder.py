"""The z-value of a pyarrow Table, vectorised with numpy, and a group cut into z-ordered files.

Spark computes the z-value as an SQL expression (spark_actors/zorder.py); a z-order group rewritten on
the pyarrow path (autooptimize/arrow/rewrite.py) needs the same number without a JVM. The definition is
autooptimize/domain/zorder.py (``ordinal``, ``scale``, ``interleave``): this module applies the same
float64 operations in the same order, so ``floor`` sees the same doubles and every code, hence every
z-value, is bit-for-bit the reference's (tests/unit/test_zorder_arrow.py checks it row by row).

Only the ordinals need care to stay exact: integers, dates and timestamps convert to float64 with
round-to-nearest as Python's ``float()`` does; a decimal whose unscaled value fits 2^53 (and scale
≤ 22) is one correctly rounded division, equal to ``float(Decimal)``, the rest go through Python;
strings and binary read their window of :data:`STRING_BYTES` bytes straight from the Arrow buffers.
Interleaving spreads each code with a 256-entry table per byte instead of one numpy pass per bit.

:func:`zorder_slices` keeps the contract of the Spark rewrite (spark_actors/rewrite.py:
``repartitionByRange(files_out, z)`` then ``sortWithinPartitions(z)``): the outputs hold disjoint z
ranges, each sorted by z, which is arrow/sort.py's cutting rule applied to the z-value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from autooptimize.domain.zorder import STRING_BYTES, ZKey

_EXACT_DECIMAL_SCALE = 22  # 10^22 is the largest power of ten a double holds exactly
_EXACT_INT = 1 << 53
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _chunks(data: pa.Table, name: str) -> list[pa.Array]:
    """The column's chunks (dictionaries decoded); processed one by one, so no 2 GiB string concatenation."""
    chunks = list(data.column(name).chunks)
    return [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in chunks]


def _window_codes(values: pa.Array, prefix: int) -> np.ndarray:
    """:func:`autooptimize.domain.zorder.string_code` of each value (any for a null), as float64."""
    if not len(values):
        return np.zeros(0, dtype=np.float64)
    t = values.type
    if not (pa.types.is_string(t) or pa.types.is_binary(t)):
        values = values.cast(pa.large_binary())  # large_string/large_binary are no-ops; views, fixed
    offset_type = np.int32 if pa.types.is_string(values.type) or pa.types.is_binary(values.type) else np.int64
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type, count=len(values) + 1,
                            offset=values.offset * np.dtype(offset_type).itemsize).astype(np.int64)
    raw = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None and data_buffer.size else None
    if raw is None:  # every value empty: every window is zeros
        return np.zeros(len(values), dtype=np.float64)
    starts = offsets[:-1] + prefix
    lengths = offsets[1:] - starts  # bytes after the prefix (negative: none)
    code = np.zeros(len(values), dtype=np.uint64)
    for j in range(STRING_BYTES):  # the window, big-endian, zero-padded on the right
        byte = np.where(lengths > j, raw[np.minimum(starts + j, len(raw) - 1)], 0).astype(np.uint64)
        code |= byte << np.uint64(8 * (STRING_BYTES - 1 - j))
    return code.astype(np.float64)  # < 2^48: exact


def _decimal_ordinals(values: pa.Array) -> np.ndarray:
    """``float(Decimal)`` of each value (correctly rounded), vectorised where that is one exact division."""
    t = values.type
    out = np.zeros(len(values), dtype=np.float64)
    slow = np.ones(len(values), dtype=bool)
    if pa.types.is_decimal128(t) and 0 <= t.scale <= _EXACT_DECIMAL_SCALE and len(values):
        words = np.frombuffer(values.buffers()[1], dtype=np.int64, count=2 * len(values),
                              offset=16 * values.offset).reshape(-1, 2)
        low, high = words[:, 0], words[:, 1]  # little-endian two's complement: value = high·2^64 + low
        slow = ~(((high == 0) & (low >= 0) & (low <= _EXACT_INT)) | ((high == -1) & (low < 0) & (low >= -_EXACT_INT)))
        out = low.astype(np.float64) / float(10 ** t.scale)  # both exact: one correctly rounded division
    slow &= values.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(slow)
    if len(rows):
        out[rows] = [float(v) for v in values.take(pa.array(rows)).to_pylist()]
    return out


def _ordinals(values: pa.Array, key: ZKey) -> np.ndarray:
    """:func:`autooptimize.domain.zorder.ordinal` of each value as float64 (any for a null; masked later)."""
    t = values.type
    if key.kind in ("string", "binary"):
        return _window_codes(values, key.prefix)
    if pa.types.is_decimal(t):
        return _decimal_ordinals(values)
    if pa.types.is_boolean(t):
        return values.fill_null(False).to_numpy(zero_copy_only=False).astype(np.float64)
    if pa.types.is_date(t):
        ints = values.cast(pa.date32()).cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64)
    elif pa.types.is_timestamp(t):
        raw = values.cast(pa.int64()).fill_null(0).to_numpy()
        ints = raw // 1000 if t.unit == "ns" else raw * _MICROS[t.unit]  # ns: floor to the microsecond
    elif pa.types.is_integer(t):
        ints = values.fill_null(0).to_numpy()
    else:  # floats: NaN orders above +inf
        numbers = values.cast(pa.float64()).fill_null(0.0).to_numpy()
        return np.where(np.isnan(numbers), np.inf, numbers)
    return ints.astype(np.float64)  # round-to-nearest-even, as Python's float(int)


def _codes(data: pa.Table, key: ZKey) -> np.ndarray:
    """:func:`autooptimize.domain.zorder.scale` of every row: 0 for null, else 1 … 2^bits - 1 (uint64)."""
    valid = np.concatenate([c.is_valid().to_numpy(zero_copy_only=False) for c in _chunks(data, key.name)]
                           or [np.zeros(0, dtype=bool)])
    if key.low is None or key.high is None or key.high <= key.low:
        return valid.astype(np.uint64)
    top = float((1 << key.bits) - 2)
    o = np.concatenate([_ordinals(c, key) for c in _chunks(data, key.name)] or [np.zeros(0)])
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.floor((o - key.low) / (key.high - key.low) * top)  # the reference's order of operations
    # o ≤ low gives ≤ 0 (−inf too) and o ≥ high gives ≥ top (+inf, NaN's ordinal, too), as the reference's
    # early returns; NaN only from inf/inf, where the reference has no answer and Spark takes top
    inner = np.clip(np.nan_to_num(scaled, nan=top, posinf=top, neginf=0.0), 0.0, top)
    return np.where(valid, inner.astype(np.uint64) + np.uint64(1), np.uint64(0))


def _spread_table(k: int) -> np.ndarray:
    """For every byte, its bit t moved to bit t·k."""
    byte = np.arange(256, dtype=np.uint64)
    out = np.zeros(256, dtype=np.uint64)
    for t in range(8):
        out |= ((byte >> np.uint64(t)) & np.uint64(1)) << np.uint64(t * k)
    return out


def _interleave(codes: Sequence[np.ndarray], bits: int) -> np.ndarray:
    """:func:`autooptimize.domain.zorder.interleave` of every row: code i's bit b at b·k + (k-1-i)."""
    k = len(codes)
    if bits * k > 63:
        raise ValueError(f"{k} keys of {bits} bits do not fit a signed 64-bit z-value")
    table = _spread_table(k)
    mask = np.uint64((1 << bits) - 1)
    z = np.zeros(len(codes[0]) if codes else 0, dtype=np.uint64)
    for i, code in enumerate(codes):
        c = code & mask  # the reference reads bits bits-1 … 0 only
        for j in range((bits + 7) // 8):
            z |= table[(c >> np.uint64(8 * j)) & np.uint64(0xFF)] << np.uint64(8 * j * k + (k - 1 - i))
    return z.astype(np.int64)


def z_values(data: pa.Table, keys: Sequence[ZKey]) -> np.ndarray:
    """:func:`autooptimize.domain.zorder.z_value` of every row of ``data`` as int64 (Spark's long; the
    value stays below 2^63). Bits of the interleaving: ``keys[0].bits``, as the reference."""
    if not keys:
        raise ValueError("a z-value needs at least one key")
    return _interleave([_codes(data, key) for key in keys], keys[0].bits)


def zorder_slices(data: pa.Table, keys: Sequence[ZKey], files_out: int) -> list[pa.Table]:
    """``data`` sorted by z-value (stable) and cut into at most ``files_out`` slices of disjoint z ranges.

    Cut ``k`` goes at row ``rows·k // files_out``, moved forward to where the z-value changes (as
    arrow.sort.sorted_slices; Spark's ``repartitionByRange`` likewise never splits equal z-values), so
    slices are near-equal unless many rows share a z-value. Each slice has exactly ``data``'s columns.
    """
    rows = data.num_rows
    if not rows:
        return [data]
    z = z_values(data, keys)
    order = np.argsort(z, kind="stable")
    ordered = data.take(pa.array(order))
    if files_out <= 1 or rows <= 1:
        return [ordered]
    starts = np.flatnonzero(np.diff(z[order])) + 1  # rows that begin a new z-value
    cuts: list[int] = []
    for k in range(1, files_out):
        wanted = max((rows * k) // files_out, cuts[-1] + 1 if cuts else 1)
        at = int(np.searchsorted(starts, wanted))
        if at < len(starts):
            cuts.append(int(starts[at]))
    bounds = [0, *sorted(set(cuts)), rows]
    return [ordered.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
