"""The compiled XXH64 kernels are bit-for-bit the numpy reference (which the Spark tests pin to Spark)."""

from __future__ import annotations

import numpy as np
import pytest

from autooptimize.engines import xxh64


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(5)


def test_the_kernels_are_the_compiled_ones() -> None:
    assert xxh64.hash_int is not xxh64.np_hash_int  # numba is a dependency: the fast path must be in use


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
def test_hash_int_equals_the_reference(rng: np.random.Generator, dtype: type) -> None:
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, size=5000, dtype=dtype, endpoint=True)
    seeds = rng.integers(0, 2**64 - 1, size=5000, dtype=np.uint64, endpoint=True)
    assert np.array_equal(xxh64.hash_int(values, seeds), xxh64.np_hash_int(values, seeds))


def test_hash_long_equals_the_reference(rng: np.random.Generator) -> None:
    values = rng.integers(-(2**63), 2**63 - 1, size=5000, dtype=np.int64, endpoint=True)
    values[:4] = [0, -1, -(2**63), 2**63 - 1]
    seeds = rng.integers(0, 2**64 - 1, size=5000, dtype=np.uint64, endpoint=True)
    assert np.array_equal(xxh64.hash_long(values, seeds), xxh64.np_hash_long(values, seeds))


def test_hash_bytes_equals_the_reference_at_every_length_around_the_stripes(rng: np.random.Generator) -> None:
    lengths = np.array([*range(0, 80), 127, 128, 129, 1000], np.int64).repeat(7)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) + rng.integers(0, 3, size=len(lengths)).cumsum()
    data = rng.integers(0, 256, size=int(starts[-1] + lengths[-1] + 8), dtype=np.uint8)
    seeds = rng.integers(0, 2**64 - 1, size=len(lengths), dtype=np.uint64, endpoint=True)
    assert np.array_equal(xxh64.hash_bytes(data, starts, lengths, seeds),
                          xxh64.np_hash_bytes(data, starts, lengths, seeds))


def test_a_known_value() -> None:
    # XXH64 of the empty input with seed 0 (the published test vector)
    empty = np.zeros(0, np.uint8)
    got = xxh64.hash_bytes(empty, np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.uint64))
    assert int(got[0]) == 0xEF46DB3751D8E999


def test_the_fused_column_kernels_give_the_column_by_column_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every type with a fused kernel, with nulls, a sliced batch (offsets) and a dictionary column."""
    import datetime as dt

    import pyarrow as pa

    from autooptimize.engines import digest

    n = 3000
    rng = np.random.default_rng(9)
    mask = rng.random(n) < 0.2

    def col(values: list, type_: pa.DataType) -> pa.Array:
        return pa.array([None if m else v for v, m in zip(values, mask, strict=True)], type_)

    ints = rng.integers(-(2**31), 2**31 - 1, size=n).tolist()
    longs = rng.integers(-(2**62), 2**62, size=n).tolist()
    doubles = [(-0.0 if i % 97 == 0 else float("nan") if i % 89 == 0 else x) for i, x in enumerate(rng.normal(size=n))]
    strings = ["é" * (i % 7) + "x" * (i % 70) for i in range(n)]
    batch = pa.RecordBatch.from_arrays([
        col(longs, pa.int64()), col(ints, pa.int32()), col([v % 100 for v in ints], pa.int16()),
        col([v % 2 == 0 for v in ints], pa.bool_()), col([dt.date(2024, 1, 1) + dt.timedelta(days=v % 900)
                                                          for v in ints], pa.date32()),
        col([v // 1000 for v in longs], pa.timestamp("us", "UTC")), col(doubles, pa.float64()),
        col(strings, pa.string()), col(strings, pa.large_string()), col([s.encode() for s in strings], pa.binary()),
        col(strings, pa.string()).dictionary_encode(),
        pa.StructArray.from_arrays([col(ints, pa.int32()), col(strings, pa.string())], names=["a", "b"],
                                   mask=pa.array(mask[::-1])),
    ], names=[f"c{i}" for i in range(12)])
    for data in (batch, batch.slice(123, 2000)):
        fused = digest.row_hashes(data)
        monkeypatch.setattr(digest, "_fused", None)
        reference = digest.row_hashes(data)
        monkeypatch.undo()
        assert np.array_equal(fused[0], reference[0]) and np.array_equal(fused[1], reference[1])

