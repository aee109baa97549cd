"""XXH64's five primes (uint64), shared by the numpy reference (xxh64.py) and the kernels (xxh64_jit.py)."""

from __future__ import annotations

import numpy as np

U64 = np.uint64
P1 = U64(0x9E3779B185EBCA87)
P2 = U64(0xC2B2AE3D27D4EB4F)
P3 = U64(0x165667B19E3779F9)
P4 = U64(0x85EBCA77C2B2AE63)
P5 = U64(0x27D4EB2F165667C5)
