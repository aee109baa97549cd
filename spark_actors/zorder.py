"""The z-value as a Spark expression: autooptimize.domain.zorder's arithmetic, evaluated in the JVM.

Built from Spark SQL functions only (no Python UDF), so a z-order rewrite ships no rows to Python and
runs at the speed of a sort. ``tests/integration/test_zorder.py`` checks the expression against
:func:`autooptimize.domain.zorder.z_value` row by row.
"""

from __future__ import annotations

from typing import Any

from autooptimize.domain.zorder import STRING_BYTES, ZKey


def _ordinal(key: ZKey, c: Any) -> Any:
    """The column on the numeric line (:func:`autooptimize.domain.zorder.ordinal`), a double."""
    from pyspark.sql import functions as F

    if key.kind in ("string", "binary"):
        raw = F.encode(c, "UTF-8") if key.kind == "string" else c
        window = F.substring(raw, key.prefix + 1, STRING_BYTES)  # bytes of a binary, 1-based
        hexed = F.rpad(F.hex(window), 2 * STRING_BYTES, "0")
        return F.conv(hexed, 16, 10).cast("double")
    if key.kind == "date":
        return F.unix_date(c).cast("double")
    if key.kind == "timestamp":
        return F.unix_micros(c.cast("timestamp")).cast("double")  # the session's time zone is UTC
    if key.kind == "boolean":
        return c.cast("int").cast("double")
    return c.cast("double")


def _code(key: ZKey, c: Any) -> Any:
    """The column's code (:func:`autooptimize.domain.zorder.scale`), a long: 0 for null."""
    from pyspark.sql import functions as F

    top = (1 << key.bits) - 2
    if key.low is None or key.high is None or key.high <= key.low:
        return F.when(c.isNull(), F.lit(0)).otherwise(F.lit(1)).cast("long")
    o = _ordinal(key, c)
    scaled = F.floor((o - F.lit(key.low)) / F.lit(key.high - key.low) * F.lit(float(top)))
    inner = F.least(F.lit(top).cast("long"), F.greatest(F.lit(0).cast("long"), scaled))
    if key.kind in ("number",):  # NaN orders above +inf (and floor(NaN) would be 0)
        inner = F.when(F.isnan(o), F.lit(top).cast("long")).otherwise(inner)
    return F.when(c.isNull(), F.lit(0).cast("long")).otherwise(inner + F.lit(1).cast("long"))


def z_column(keys: list[ZKey]) -> Any:
    """The interleaved z-value of ``keys`` (column names of the rewritten frame) as a long column."""
    from pyspark.sql import functions as F

    k = len(keys)
    bits = keys[0].bits
    codes = [_code(key, F.col(f"`{key.name}`")) for key in keys]
    terms = [F.shiftleft(F.shiftright(code, b).bitwiseAND(F.lit(1).cast("long")), b * k + (k - 1 - i))
             for b in range(bits - 1, -1, -1) for i, code in enumerate(codes)]
    while len(terms) > 1:  # a balanced OR: a chain of 63 would nest the plan message 63 levels deep
        terms = [a.bitwiseOR(b) for a, b in zip(terms[::2], terms[1::2], strict=False)] + (
            [terms[-1]] if len(terms) % 2 else [])
    return terms[0]
