"""The one content digest of a set of rows, computed the same way by Spark and by pyarrow.

Definition. Number the columns of the schema depth first, a struct before its fields (position p =
0, 1, ...). For one row, the row hash of a lane is Spark's ``xxhash64`` chain (XXH64, each argument
hashed with the previous hash as seed, starting from seed 42) over, for every position p in order:

* a marker, the 32-bit int ``2p`` when the value is present or ``2p + 1`` when it is null;
* then, only when present, the value as Spark's ``xxhash64`` hashes it: ints, shorts, bytes,
  booleans (0/1) and dates (days) as 4 bytes; longs and timestamps (with or without zone, micros) as
  8 bytes; floats and doubles as their IEEE bits with -0.0 read as 0.0 and every NaN as the one
  canonical NaN; decimals of precision <= 18 as their unscaled long, wider ones as the minimal
  big-endian two's complement bytes of the unscaled value; strings as UTF-8 bytes; binary, fixed and
  uuid as their bytes; times as 8 bytes of nanoseconds (Spark's internal form).
  A struct contributes only its marker; its fields follow at their own positions (null under a null
  struct). A list or map value is hashed as the UTF-8 bytes of a JSON text (``to_json`` in Spark;
  JSON with map entries sorted in pyarrow): each engine is consistent with itself there, the two
  engines are not claimed to agree (only the pyarrow path rewrites lists and maps).

Lane 1 starts its chain with the markers; lane 2 first hashes the int ``LANE2_TAG``. The digest is
``rows:h1:h2`` (hex), h1 and h2 the exact sums over rows of the lanes' unsigned 64-bit row hashes.

What equal digests prove: with overwhelming probability the same multiset of rows, where a row
is its values in column order with every null marked at its position (so a value moved into an
adjacent null column of the same type changes the digest; Spark's plain ``xxhash64``, which skips
nulls, does not see that). Sums make the digest independent of row order and of how the rows are
split into files or groups: the digest of a union is the field-wise sum of the parts' digests.
What they do not prove: anything about column names, field ids, physical Parquet types or file
layout (checked elsewhere); that -0.0 and 0.0, or two NaN payloads, were kept apart (they are one
value here); and sums of hashes are not cryptographic, only a guard against accidents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from autooptimize.engines import xxh64_jit as jit
from autooptimize.engines.xxh64 import SPARK_SEED, hash_bytes, hash_int, hash_long

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CHUNK_ROWS = 1 << 17  # rows hashed per call (about 5 MB of a typical table)
LANE2_TAG = -1  # hashed first in lane 2 (as a 32-bit int) so its chain starts from another seed
_TWO_64 = "18446744073709551616"


@dataclass(frozen=True)
class ContentDigest:
    """Rows and the ``rows:h1:h2`` checksum of a set of rows (see the module docstring)."""

    rows: int
    checksum: str

    @classmethod
    def of(cls, rows: int, h1: int, h2: int) -> ContentDigest:
        return cls(rows=rows, checksum=f"{rows}:{h1:x}:{h2:x}")


EMPTY_DIGEST = ContentDigest.of(0, 0, 0)


# ---- pyarrow ----------------------------------------------------------------------------------


def _leaves(columns: list[pa.Array]) -> list[tuple[pa.Array, bool]]:
    """(array, hash the values?) per position, depth first; a struct gives its marker, then its fields."""
    out: list[tuple[pa.Array, bool]] = []
    for column in columns:
        if isinstance(column.type, pa.ExtensionType):
            column = column.storage
        if pa.types.is_struct(column.type):
            out.append((column, False))
            out.extend(_leaves(column.flatten()))  # flatten() nulls the fields of a null struct
        else:
            out.append((column, True))
    return out


def _ints(arr: pa.Array, width: pa.DataType) -> np.ndarray:
    return arr.cast(width, safe=False).fill_null(0).to_numpy(zero_copy_only=False)


def _floats(arr: pa.Array, bits: type, nan_bits: int) -> np.ndarray:
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    values = np.where(values == 0, np.zeros(1, values.dtype), values)  # -0.0 reads as 0.0
    out = values.view(bits).copy()
    out[np.isnan(values)] = nan_bits
    return out


def _bytes_view(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, starts, lengths) of a binary-like array, without copying the values."""
    t = arr.type
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = np.frombuffer(arr.buffers()[1], np.uint8)
        starts = (np.arange(len(arr)) + arr.offset) * width
        return data, starts, np.full(len(arr), width)
    if not (pa.types.is_large_string(t) or pa.types.is_large_binary(t)):
        arr = arr.cast(pa.large_binary())  # string, binary and the view types
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return data, offsets[:-1], np.diff(offsets)


def _decimal(arr: pa.Array, seeds: np.ndarray) -> np.ndarray:
    words = np.frombuffer(arr.buffers()[1], "<i8")[2 * arr.offset: 2 * (arr.offset + len(arr))]
    if arr.type.precision <= 18:
        return hash_long(words[0::2], seeds)
    big_endian = np.ascontiguousarray(words.view(np.uint8).reshape(-1, 16)[:, ::-1])
    # leading bytes Java's BigInteger.toByteArray leaves out: a sign byte the next byte repeats
    redundant = ((big_endian[:, :-1] == 0) & (big_endian[:, 1:] < 0x80)) | (
        (big_endian[:, :-1] == 0xFF) & (big_endian[:, 1:] >= 0x80))
    skip = np.cumprod(redundant, axis=1).sum(axis=1)
    starts = np.arange(len(arr)) * 16 + skip
    return hash_bytes(big_endian.ravel(), starts, 16 - skip, seeds)


def _json(value: Any) -> Any:
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {json.dumps(_json(k), default=str): _json(v) for k, v in sorted(value, key=repr)}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _nested(arr: pa.Array) -> pa.Array:
    # lists and maps only: one JSON text per value (a loop in Python, these columns are rare)
    texts = [None if v is None else json.dumps(_json(v), default=str, separators=(",", ":"))
             for v in arr.to_pylist()]
    return pa.array(texts, pa.large_string())


def _hash_values(arr: pa.Array, seeds: np.ndarray) -> np.ndarray:
    t = arr.type
    if pa.types.is_dictionary(t):
        return _hash_values(arr.dictionary_decode(), seeds)
    if pa.types.is_boolean(t) or pa.types.is_date32(t) or (pa.types.is_integer(t) and t.bit_width <= 32):
        return hash_int(_ints(arr, pa.int32()), seeds)
    if pa.types.is_integer(t):
        return hash_long(_ints(arr, pa.int64()), seeds)
    if pa.types.is_timestamp(t):
        return hash_long(_ints(arr.cast(pa.timestamp("us", t.tz), safe=False), pa.int64()), seeds)
    if pa.types.is_time(t):
        return hash_long(_ints(arr.cast(pa.time64("ns")), pa.int64()), seeds)
    if pa.types.is_float32(t):
        return hash_int(_floats(arr, np.int32, 0x7FC00000), seeds)
    if pa.types.is_floating(t):
        return hash_long(_floats(arr.cast(pa.float64()), np.int64, 0x7FF8000000000000), seeds)
    if pa.types.is_decimal(t):
        return _decimal(arr.cast(pa.decimal128(t.precision, t.scale)), seeds)
    if pa.types.is_null(t):
        return seeds
    if pa.types.is_nested(t):
        arr = _nested(arr)
    data, starts, lengths = _bytes_view(arr)
    return hash_bytes(data, starts, lengths, seeds)


def row_hashes(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """The two lanes' row hashes (uint64) of every row of ``batch``."""
    n = batch.num_rows
    lanes = [np.full(n, SPARK_SEED, np.uint64), hash_int(np.full(n, LANE2_TAG), np.full(n, SPARK_SEED, np.uint64))]
    for position, (arr, hash_value) in enumerate(_leaves(list(batch.columns))):
        if _fused is not None and _fused(arr, hash_value, position, lanes[0], lanes[1]):
            continue
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        marker = 2 * position + (~valid).astype(np.int64)
        for i, seeds in enumerate(lanes):
            seeds = hash_int(marker, seeds)
            lanes[i] = np.where(valid, _hash_values(arr, seeds), seeds) if hash_value else seeds
    return lanes[0], lanes[1]


def _raw(arr: pa.Array, dtype: type) -> np.ndarray:
    """The values buffer of a primitive array as numpy (null slots hold whatever the buffer holds)."""
    return np.frombuffer(arr.buffers()[1], dtype)[arr.offset: arr.offset + len(arr)]


def _fused_column(arr: pa.Array, hash_value: bool, position: int, lane1: np.ndarray, lane2: np.ndarray) -> bool:
    """Hash one column into both lanes in place with the fused kernels; False when its type has none
    (the caller then takes the column-by-column path, which is the definition)."""
    valid = np.ones(len(arr), np.bool_) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    if not hash_value:
        jit.chain_marker(valid, position, lane1, lane2)
        return True
    t = arr.type
    if pa.types.is_dictionary(t):
        return _fused_column(arr.dictionary_decode(), hash_value, position, lane1, lane2)
    if pa.types.is_int64(t) or pa.types.is_uint64(t) or (pa.types.is_timestamp(t) and t.unit == "us"):
        jit.chain_longs(_raw(arr, np.int64), valid, position, lane1, lane2)
    elif pa.types.is_int32(t) or pa.types.is_date32(t):
        jit.chain_ints(_raw(arr, np.int32), valid, position, lane1, lane2)
    elif pa.types.is_boolean(t) or (pa.types.is_integer(t) and t.bit_width <= 32):
        jit.chain_ints(_ints(arr, pa.int32()), valid, position, lane1, lane2)
    elif pa.types.is_float64(t):
        jit.chain_doubles(_raw(arr, np.float64), valid, position, lane1, lane2)
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        data, starts, lengths = _bytes_view(arr)
        jit.chain_bytes(np.ascontiguousarray(data, np.uint8), starts.astype(np.int64, copy=False),
                        lengths.astype(np.int64, copy=False), valid, position, lane1, lane2)
    else:
        return False
    return True


try:
    import autooptimize.engines.xxh64_jit  # noqa: F401
except ImportError:  # pragma: no cover - numba is a dependency
    _fused = None
else:
    _fused = _fused_column


def _exact_sum(hashes: np.ndarray) -> int:
    # two 32-bit halves summed in uint64 cannot overflow below 2**32 rows
    return (int((hashes >> np.uint64(32)).sum()) << 32) + int((hashes & np.uint64(0xFFFFFFFF)).sum())


@dataclass
class DigestAccumulator:
    """Adds batches up (streams: memory holds about :data:`CHUNK_ROWS` rows); ``digest`` is that of all
    rows added. Small batches (one per small input file) are hashed together: the per-call cost of
    each column's kernels, not the hashing, dominated batches of a few thousand rows."""

    rows: int = 0
    h1: int = 0
    h2: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0

    def add(self, data: pa.RecordBatch | pa.Table) -> None:
        for batch in data.to_batches() if isinstance(data, pa.Table) else [data]:
            if not batch.num_rows:
                continue
            if self.pending and batch.schema != self.pending[0].schema:
                self._flush()
            self.pending.append(batch)
            self.pending_rows += batch.num_rows
            self.rows += batch.num_rows  # counted when added: ``rows`` is always every row added
            if self.pending_rows >= CHUNK_ROWS:
                self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        batches, self.pending, self.pending_rows = self.pending, [], 0
        batch = batches[0] if len(batches) == 1 else \
            pa.Table.from_batches(batches).combine_chunks().to_batches(max_chunksize=None)[0]
        lane1, lane2 = row_hashes(batch)
        self.h1, self.h2 = self.h1 + _exact_sum(lane1), self.h2 + _exact_sum(lane2)

    @property
    def digest(self) -> ContentDigest:
        self._flush()
        return ContentDigest.of(self.rows, self.h1, self.h2)


def arrow_digest(data: pa.Table | pa.RecordBatch) -> ContentDigest:
    """The digest of ``data``, computed with pyarrow and numpy."""
    acc = DigestAccumulator()
    acc.add(data)
    return acc.digest


# ---- Spark ------------------------------------------------------------------------------------


def _spark_arguments(columns: list[tuple[Column, Any]], start: int = 0) -> tuple[list[Column], int]:
    """The xxhash64 arguments (marker, value) per position, depth first, and the next position."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    args: list[Column] = []
    position = start
    for col, dtype in columns:
        args.append(F.when(col.isNull(), F.lit(2 * position + 1)).otherwise(F.lit(2 * position)))
        position += 1
        if isinstance(dtype, StructType):
            fields = [(col.getField(f.name), f.dataType) for f in dtype.fields]
            nested, position = _spark_arguments(fields, position)
            args.extend(nested)
        elif isinstance(dtype, ArrayType | MapType):
            args.append(F.to_json(col))
        else:
            args.append(col)
    return args, position


def _unsigned(h: Column) -> Column:
    from pyspark.sql import functions as F

    wide = h.cast("decimal(38,0)")
    return wide + F.when(h < 0, F.lit(_TWO_64).cast("decimal(38,0)")).otherwise(F.lit(0).cast("decimal(38,0)"))


def spark_digest_columns(df: DataFrame) -> list[Column]:
    """Aggregate columns ``rows``, ``h1``, ``h2`` of ``df`` (for ``agg`` or ``observe``)."""
    from pyspark.sql import functions as F

    args, _ = _spark_arguments([(df[f"`{f.name}`"], f.dataType) for f in df.schema.fields])
    lane1 = F.xxhash64(*args) if args else F.lit(SPARK_SEED).cast("long")
    lane2 = F.xxhash64(F.lit(LANE2_TAG), *args)
    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(_unsigned(lane1)).alias("h1"),
        F.sum(_unsigned(lane2)).alias("h2"),
    ]


def spark_digest(row: Any) -> ContentDigest:
    """The digest from a row (or observation) holding the ``spark_digest_columns`` aggregates."""
    return ContentDigest.of(int(row["rows"] or 0), int(row["h1"] or 0), int(row["h2"] or 0))
