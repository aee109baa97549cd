"""Z-order keys: each key column mapped to an order-preserving code, the codes' bits interleaved.

This module is the specification: ``spark_actors/zorder.py`` builds the same arithmetic as a Spark
expression (so the z-value is computed in the JVM, with no rows shipped to Python), and the
integration tests check that Spark's z-values equal :func:`z_value` on real rows.

A column's values are first put on one numeric line (:func:`ordinal`), a ``float`` that never
reverses the column's order:

* integers, decimals, floats: the value itself (NaN sorts above +inf, as in Spark and Iceberg);
* dates: days since 1970; timestamps: microseconds since 1970 (exact up to 2^53 µs, ±285 years);
* booleans: 0 and 1;
* strings and binary: their UTF-8 (or raw) bytes, *after the prefix every value of the group shares*
  (the common prefix of the group's lower and upper bound: a value between two strings starts with
  their common prefix), the next :data:`STRING_BYTES` bytes read big-endian, zero-padded. Strings that
  differ only later tie; the z-order cannot tell them apart, which costs clustering, never rows.

Each ordinal is then scaled linearly from the group's ``[low, high]`` (the input files' column bounds)
to ``1 .. 2^bits - 1`` and clamped, and a null is ``0``: nulls first. ``bits`` is ``63 // columns``,
so the interleaved value fits a signed 64-bit integer (Spark's ``long``) and sorts the same there.
Interleaving takes, from the most significant bit down, one bit of each column in the order named.

Scaling by the bounds rather than by the type's full range is what makes two columns of narrow
ranges (ids 0..10^6 in a 64-bit type) spread over all of their bits; with raw bits the top 40 would
be equal and the curve would order by the low bits only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Bytes of a string (after the shared prefix) that reach its code: 6 bytes = 48 bits, exact in a double.
STRING_BYTES = 6
#: The column types a z-order key may use, by Iceberg's type name (``decimal(p, s)`` as ``decimal``).
KIND_OF_TYPE = {
    "int": "number", "long": "number", "float": "number", "double": "number", "decimal": "number",
    "date": "date", "timestamp": "timestamp", "timestamptz": "timestamp",
    "string": "string", "binary": "binary", "boolean": "boolean",
}
MIN_COLUMNS, MAX_COLUMNS = 2, 4


@dataclass(frozen=True)
class ZKey:
    """One key column as the rewrite scales it: its name, kind, the group's range and the bits it gets.

    ``prefix`` (strings and binary) is how many leading bytes every value of the group shares;
    ``low``/``high`` are ordinals (:func:`ordinal`) of the group's bounds, None when unknown
    (then every non-null value gets the same code).
    """

    name: str
    kind: str
    low: float | None
    high: float | None
    bits: int
    prefix: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "low": self.low, "high": self.high, "bits": self.bits,
                "prefix": self.prefix}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ZKey:
        return cls(d["name"], d["kind"], d["low"], d["high"], int(d["bits"]), int(d.get("prefix", 0)))


def bits_per_column(columns: int) -> int:
    """Bits each of ``columns`` key columns gets, so the interleaved value stays below 2^63."""
    if not MIN_COLUMNS <= columns <= MAX_COLUMNS:
        raise ValueError(f"a z-order takes {MIN_COLUMNS} to {MAX_COLUMNS} columns (got {columns})")
    return 63 // columns


def _as_bytes(kind: str, value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if kind == "string":
        return str(value).encode("utf-8")
    raise TypeError(f"a {kind} key needs bytes or str (got {type(value).__name__})")


def string_code(raw: bytes, prefix: int) -> float:
    """The :data:`STRING_BYTES` bytes after ``prefix``, big-endian, zero-padded (exact as a float)."""
    window = raw[prefix:prefix + STRING_BYTES]
    return float(int.from_bytes(window.ljust(STRING_BYTES, b"\0"), "big"))


def ordinal(kind: str, value: Any, prefix: int = 0) -> float:
    """``value`` of a column of ``kind`` on the numeric line (see the module doc); never None."""
    if kind in ("string", "binary"):
        return string_code(_as_bytes(kind, value), prefix)
    if kind == "boolean":
        return 1.0 if value else 0.0
    if kind in ("date", "timestamp") and not isinstance(value, int | float):
        raise TypeError(f"a {kind} key is days or microseconds since 1970 as a number (got {value!r})")
    number = float(value)
    return math.inf if math.isnan(number) else number


def common_prefix(low: bytes, high: bytes) -> int:
    """Length of the longest common prefix of two byte strings."""
    n = 0
    for a, b in zip(low, high, strict=False):
        if a != b:
            break
        n += 1
    return n


def key_for(name: str, kind: str, low: Any, high: Any, bits: int) -> ZKey:
    """The key of a column whose group-wide bounds are ``low``/``high`` (None: unknown)."""
    if kind not in set(KIND_OF_TYPE.values()):
        raise ValueError(f"z-order column {name!r}: kind {kind!r} is not one of {sorted(set(KIND_OF_TYPE.values()))}")
    if low is None or high is None:
        return ZKey(name, kind, None, None, bits)
    prefix = 0
    if kind in ("string", "binary"):
        prefix = common_prefix(_as_bytes(kind, low), _as_bytes(kind, high))
    lo, hi = ordinal(kind, low, prefix), ordinal(kind, high, prefix)
    if not math.isfinite(hi - lo) or hi < lo:  # unbounded, or a span a float cannot hold (−1.8e308 .. 1e299)
        return ZKey(name, kind, None, None, bits, prefix)
    return ZKey(name, kind, lo, hi, bits, prefix)


def scale(key: ZKey, value: Any) -> int:
    """``value``'s code: 0 for null, else ``1 + floor((o - low) / (high - low) * (2^bits - 2))`` clamped
    to ``1 .. 2^bits - 1``. The same operations, in the same order, as the Spark expression."""
    if value is None:
        return 0
    top = float((1 << key.bits) - 2)
    if key.low is None or key.high is None or key.high <= key.low:
        return 1
    o = ordinal(key.kind, value, key.prefix)
    if o <= key.low:
        return 1
    if o >= key.high:
        return int(top) + 1
    return 1 + min(int(top), max(0, math.floor((o - key.low) / (key.high - key.low) * top)))


def interleave(codes: list[int], bits: int) -> int:
    """The bits of ``codes`` interleaved, most significant first, the first code's bit leading each round."""
    k = len(codes)
    z = 0
    for b in range(bits - 1, -1, -1):
        for c, code in enumerate(codes):
            z |= ((code >> b) & 1) << (b * k + (k - 1 - c))
    return z


def z_value(keys: list[ZKey], values: list[Any]) -> int:
    """The z-value of one row's key ``values`` (the reference the Spark expression must equal)."""
    return interleave([scale(k, v) for k, v in zip(keys, values, strict=True)], keys[0].bits)
