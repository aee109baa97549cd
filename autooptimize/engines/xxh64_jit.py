"""The XXH64 kernels of :mod:`autooptimize.engines.xxh64`, compiled with numba.

The numpy versions make one temporary array per arithmetic step; on a merge they took 1.0 s of every
25 MB digested, twice as long as reading and writing the data (``python -m benchmarks.merge``). These
loops do the same arithmetic row by row in machine code, release the GIL (groups of an action are
digested on several threads at once) and are cached on disk after their first compilation.
Every function here is bit-for-bit its numpy twin; ``tests/unit/test_xxh64_jit.py`` compares them.
"""

from __future__ import annotations

import numba
import numpy as np

from autooptimize.engines.xxh64_primes import P1, P2, P3, P4, P5

_U = np.uint64
_MASK32 = _U(0xFFFFFFFF)

_jit = numba.njit(nogil=True, cache=True, boundscheck=False)


@_jit
def _rotl(x, r):  # type: ignore[no-untyped-def]
    return (x << _U(r)) | (x >> _U(64 - r))


@_jit
def _round(acc, lane):  # type: ignore[no-untyped-def]
    return _rotl(acc + lane * P2, 31) * P1


@_jit
def _avalanche(h):  # type: ignore[no-untyped-def]
    h = h ^ (h >> _U(33))
    h = h * P2
    h = h ^ (h >> _U(29))
    h = h * P3
    return h ^ (h >> _U(32))


@_jit
def _u64(data, pos):  # type: ignore[no-untyped-def]
    """The 8 bytes at ``pos`` as a little-endian unsigned integer, written out (``_u32``: 4 bytes): a loop
    over the width was not turned into one load, and strings hashed at half the speed."""
    return (_U(data[pos]) | (_U(data[pos + 1]) << _U(8)) | (_U(data[pos + 2]) << _U(16))
            | (_U(data[pos + 3]) << _U(24)) | (_U(data[pos + 4]) << _U(32)) | (_U(data[pos + 5]) << _U(40))
            | (_U(data[pos + 6]) << _U(48)) | (_U(data[pos + 7]) << _U(56)))


@_jit
def _u32(data, pos):  # type: ignore[no-untyped-def]
    return _U(data[pos]) | (_U(data[pos + 1]) << _U(8)) | (_U(data[pos + 2]) << _U(16)) | (_U(data[pos + 3]) << _U(24))


@_jit
def hash_int(values, seeds):  # type: ignore[no-untyped-def]
    """XXH64 of each value's low 4 bytes (values int64, seeds uint64)."""
    out = np.empty(seeds.shape[0], np.uint64)
    for i in range(seeds.shape[0]):
        h = seeds[i] + P5 + _U(4)
        h = h ^ ((_U(values[i]) & _MASK32) * P1)
        out[i] = _avalanche(_rotl(h, 23) * P2 + P3)
    return out


@_jit
def hash_long(values, seeds):  # type: ignore[no-untyped-def]
    """XXH64 of each value's 8 bytes (values int64, seeds uint64)."""
    out = np.empty(seeds.shape[0], np.uint64)
    for i in range(seeds.shape[0]):
        h = seeds[i] + P5 + _U(8)
        h = h ^ _round(_U(0), _U(values[i]))
        out[i] = _avalanche(_rotl(h, 27) * P1 + P4)
    return out


@_jit
def _hash_one(data, pos, length, seed):  # type: ignore[no-untyped-def]
    """XXH64 of ``data[pos:pos + length]`` with ``seed``."""
    end = pos + length
    if length >= 32:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        while pos + 32 <= end:
            v1 = _round(v1, _u64(data, pos))
            v2 = _round(v2, _u64(data, pos + 8))
            v3 = _round(v3, _u64(data, pos + 16))
            v4 = _round(v4, _u64(data, pos + 24))
            pos += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = (h ^ _round(_U(0), v1)) * P1 + P4
        h = (h ^ _round(_U(0), v2)) * P1 + P4
        h = (h ^ _round(_U(0), v3)) * P1 + P4
        h = (h ^ _round(_U(0), v4)) * P1 + P4
    else:
        h = seed + P5
    h = h + _U(length)
    while pos + 8 <= end:
        h = _rotl(h ^ _round(_U(0), _u64(data, pos)), 27) * P1 + P4
        pos += 8
    if pos + 4 <= end:
        h = _rotl(h ^ (_u32(data, pos) * P1), 23) * P2 + P3
        pos += 4
    while pos < end:
        h = _rotl(h ^ (_U(data[pos]) * P5), 11) * P1
        pos += 1
    return _avalanche(h)


@_jit
def hash_bytes(data, starts, lengths, seeds):  # type: ignore[no-untyped-def]
    """XXH64 of ``data[starts[i]:starts[i] + lengths[i]]`` (data uint8, starts/lengths int64)."""
    out = np.empty(seeds.shape[0], np.uint64)
    for i in range(seeds.shape[0]):
        out[i] = _hash_one(data, starts[i], lengths[i], seeds[i])
    return out


# ---- fused: one column's marker and value, both lanes, in one pass ----------------------------
# For row i: each lane is hashed with the column's marker (2p when present, 2p + 1 when null), then,
# when present, with the value; exactly the chain autooptimize/engines/digest.row_hashes builds
# column by column, without its temporaries.


@_jit
def _int_step(v, h):  # type: ignore[no-untyped-def]
    h = h + P5 + _U(4)
    h = h ^ ((_U(v) & _MASK32) * P1)
    return _avalanche(_rotl(h, 23) * P2 + P3)


@_jit
def _long_step(v, h):  # type: ignore[no-untyped-def]
    h = h + P5 + _U(8)
    h = h ^ _round(_U(0), v)
    return _avalanche(_rotl(h, 27) * P1 + P4)


@_jit
def _marked(present, position, h):  # type: ignore[no-untyped-def]
    """``h`` chained with the column's marker: 2p when the value is present, 2p + 1 when null."""
    return _int_step(2 * position + (0 if present else 1), h)


@_jit
def chain_ints(values, valid, position, lane1, lane2):  # type: ignore[no-untyped-def]
    """Values hashed as 4 bytes (int8/16/32 raw values; booleans and dates as ints)."""
    for i in range(lane1.shape[0]):
        present = valid[i]
        a = _marked(present, position, lane1[i])
        b = _marked(present, position, lane2[i])
        if present:
            a = _int_step(values[i], a)
            b = _int_step(values[i], b)
        lane1[i] = a
        lane2[i] = b


@_jit
def chain_longs(values, valid, position, lane1, lane2):  # type: ignore[no-untyped-def]
    """Values hashed as 8 bytes (int64 raw values: longs, timestamps in micros)."""
    for i in range(lane1.shape[0]):
        present = valid[i]
        a = _marked(present, position, lane1[i])
        b = _marked(present, position, lane2[i])
        if present:
            v = _U(values[i])
            a = _long_step(v, a)
            b = _long_step(v, b)
        lane1[i] = a
        lane2[i] = b


@_jit
def chain_doubles(values, valid, position, lane1, lane2):  # type: ignore[no-untyped-def]
    """float64 values as their IEEE bits, -0.0 as 0.0 and every NaN as the canonical NaN."""
    bits = values.view(np.uint64)
    for i in range(lane1.shape[0]):
        present = valid[i]
        a = _marked(present, position, lane1[i])
        b = _marked(present, position, lane2[i])
        if present:
            x = values[i]
            if x != x:
                v = _U(0x7FF8000000000000)
            elif x == 0.0:
                v = _U(0)
            else:
                v = bits[i]
            a = _long_step(v, a)
            b = _long_step(v, b)
        lane1[i] = a
        lane2[i] = b


@_jit
def chain_marker(valid, position, lane1, lane2):  # type: ignore[no-untyped-def]
    """Only the marker (a struct's own position)."""
    for i in range(lane1.shape[0]):
        lane1[i] = _marked(valid[i], position, lane1[i])
        lane2[i] = _marked(valid[i], position, lane2[i])


@_jit
def _merged(v1, v2, v3, v4):  # type: ignore[no-untyped-def]
    """The four accumulators of a long input merged into one hash (XXH64's merge rounds)."""
    h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
    h = (h ^ _round(_U(0), v1)) * P1 + P4
    h = (h ^ _round(_U(0), v2)) * P1 + P4
    h = (h ^ _round(_U(0), v3)) * P1 + P4
    return (h ^ _round(_U(0), v4)) * P1 + P4


@_jit
def _hash_pair(data, pos, length, seed_a, seed_b):  # type: ignore[no-untyped-def]
    """``(_hash_one(data, pos, length, seed_a), _hash_one(data, pos, length, seed_b))``, reading each word
    of the value once for both (strings hashed in half the time)."""
    end = pos + length
    if length >= 32:
        a1, a2, a3, a4 = seed_a + P1 + P2, seed_a + P2, seed_a, seed_a - P1
        b1, b2, b3, b4 = seed_b + P1 + P2, seed_b + P2, seed_b, seed_b - P1
        while pos + 32 <= end:
            w = _u64(data, pos)
            a1, b1 = _round(a1, w), _round(b1, w)
            w = _u64(data, pos + 8)
            a2, b2 = _round(a2, w), _round(b2, w)
            w = _u64(data, pos + 16)
            a3, b3 = _round(a3, w), _round(b3, w)
            w = _u64(data, pos + 24)
            a4, b4 = _round(a4, w), _round(b4, w)
            pos += 32
        a = _merged(a1, a2, a3, a4)
        b = _merged(b1, b2, b3, b4)
    else:
        a = seed_a + P5
        b = seed_b + P5
    a = a + _U(length)
    b = b + _U(length)
    while pos + 8 <= end:
        k = _round(_U(0), _u64(data, pos))
        a = _rotl(a ^ k, 27) * P1 + P4
        b = _rotl(b ^ k, 27) * P1 + P4
        pos += 8
    if pos + 4 <= end:
        k = _u32(data, pos) * P1
        a = _rotl(a ^ k, 23) * P2 + P3
        b = _rotl(b ^ k, 23) * P2 + P3
        pos += 4
    while pos < end:
        k = _U(data[pos]) * P5
        a = _rotl(a ^ k, 11) * P1
        b = _rotl(b ^ k, 11) * P1
        pos += 1
    return _avalanche(a), _avalanche(b)


@_jit
def chain_bytes(data, starts, lengths, valid, position, lane1, lane2):  # type: ignore[no-untyped-def]
    """Values ``data[starts[i]:starts[i] + lengths[i]]`` (strings as UTF-8, binaries)."""
    for i in range(lane1.shape[0]):
        present = valid[i]
        a = _marked(present, position, lane1[i])
        b = _marked(present, position, lane2[i])
        if present:
            a, b = _hash_pair(data, starts[i], lengths[i], a, b)
        lane1[i] = a
        lane2[i] = b
