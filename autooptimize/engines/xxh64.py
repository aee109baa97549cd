"""XXH64 over numpy arrays, bit-for-bit the function Spark's ``xxhash64`` applies to each argument.

Every function takes a vector of seeds (uint64) and returns a vector of hashes (uint64), so a chain
of arguments is hashed as Spark does: each argument is hashed with the previous hash as its seed.
``hash_int``, ``hash_long`` and ``hash_bytes`` run the compiled kernels of
:mod:`autooptimize.engines.xxh64_jit` (about ten times faster); the ``np_*`` functions here are the
numpy reference they are tested against, and the fallback where numba cannot be imported.
"""

from __future__ import annotations

import numpy as np

from autooptimize.engines.xxh64_primes import P1, P2, P3, P4, P5, U64

SPARK_SEED = 42  # the seed Spark's xxhash64 starts its chain with


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << U64(r)) | (x >> U64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * P2, 31) * P1


def _avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> U64(33))
    h = h * P2
    h = h ^ (h >> U64(29))
    h = h * P3
    return h ^ (h >> U64(32))


def np_hash_int(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each value's 4 little-endian bytes (Spark's hashInt: ints, dates, booleans, floats' bits)."""
    with np.errstate(over="ignore"):
        low = values.astype(np.int64).astype(np.uint64) & U64(0xFFFFFFFF)
        h = seeds + P5 + U64(4)
        h = h ^ (low * P1)
        return _avalanche(_rotl(h, 23) * P2 + P3)


def np_hash_long(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each value's 8 little-endian bytes (Spark's hashLong: longs, timestamps, doubles' bits)."""
    with np.errstate(over="ignore"):
        h = seeds + P5 + U64(8)
        h = h ^ _round(np.zeros_like(h), values.astype(np.int64).view(np.uint64))
        return _avalanche(_rotl(h, 27) * P1 + P4)


def _read(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    gathered = data[pos[:, None] + np.arange(width)]
    dtype = np.dtype("<u8") if width == 8 else np.dtype("<u4")
    return np.ascontiguousarray(gathered).view(dtype).ravel().astype(np.uint64)


def np_hash_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of ``data[starts[i]:starts[i] + lengths[i]]`` for every i (strings, binaries, big decimals)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    starts, lengths = starts.astype(np.int64), lengths.astype(np.int64)
    with np.errstate(over="ignore"):
        stripes = lengths // 32
        h = seeds + P5
        big = np.nonzero(stripes > 0)[0]
        if big.size:
            s = seeds[big]
            v = [s + P1 + P2, s + P2, s.copy(), s - P1]
            for k in range(int(stripes[big].max())):
                live = stripes[big] > k
                for lane in range(4):
                    pos = starts[big][live] + 32 * k + 8 * lane
                    v[lane][live] = _round(v[lane][live], _read(data, pos, 8))
            acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for lane in v:
                acc = (acc ^ _round(np.zeros_like(lane), lane)) * P1 + P4
            h[big] = acc
        h = h + lengths.astype(np.uint64)
        pos, left = starts + 32 * stripes, lengths - 32 * stripes
        for _ in range(3):  # at most three 8-byte lanes remain after the stripes
            live = left >= 8
            if live.any():
                k1 = _round(np.zeros(int(live.sum()), np.uint64), _read(data, pos[live], 8))
                h[live] = _rotl(h[live] ^ k1, 27) * P1 + P4
                pos, left = pos + 8 * live, left - 8 * live
        live = left >= 4
        if live.any():
            h[live] = _rotl(h[live] ^ (_read(data, pos[live], 4) * P1), 23) * P2 + P3
            pos, left = pos + 4 * live, left - 4 * live
        for _ in range(3):
            live = left > 0
            if live.any():
                h[live] = _rotl(h[live] ^ (data[pos[live]].astype(np.uint64) * P5), 11) * P1
                pos, left = pos + live, left - live
        return _avalanche(h)


def _jit_int(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    return xxh64_jit.hash_int(np.ascontiguousarray(values, np.int64), np.ascontiguousarray(seeds, np.uint64))


def _jit_long(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    return xxh64_jit.hash_long(np.ascontiguousarray(values).astype(np.int64, copy=False),
                               np.ascontiguousarray(seeds, np.uint64))


def _jit_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    return xxh64_jit.hash_bytes(np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(starts, np.int64),
                                np.ascontiguousarray(lengths, np.int64), np.ascontiguousarray(seeds, np.uint64))


try:
    from autooptimize.engines import xxh64_jit
except ImportError:  # pragma: no cover - numba is a dependency; the numpy reference still works without it
    hash_int, hash_long, hash_bytes = np_hash_int, np_hash_long, np_hash_bytes
else:
    hash_int, hash_long, hash_bytes = _jit_int, _jit_long, _jit_bytes
