"""Sizes as operators write them: ``134217728``, ``128MiB``, ``64MB``, ``1.5GiB`` (binary units)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from autooptimize.errors import InvalidArgument

MiB = 1024 * 1024
#: The largest size PostgreSQL stores (bigint); a larger size is refused.
MAX_BYTES = 2**63 - 1

_SIZE_RE = re.compile(r"\A[ \t]*(\d+(?:\.\d+)?)[ \t]*([KMGT]?i?B?)?[ \t]*\Z", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": MiB, "MB": MiB, "MIB": MiB,
          "G": 1024 * MiB, "GB": 1024 * MiB, "GIB": 1024 * MiB, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}
VALID = "use whole bytes or a unit like 64MiB, 512KiB, 1.5GiB"


def parse_size(value: object, name: str = "size") -> int:
    """Bytes from an int or a string such as ``64MiB``; a fraction only with a unit (rounded down to a
    whole byte). InvalidArgument names ``name`` and what is valid: a negative size, a fraction of a byte,
    a size beyond :data:`MAX_BYTES` and anything else that is not a size are refused."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgument(f"{name}={value!r} is not a size; {VALID}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(value)
        unit = (match.group(2) or "").upper() if match else ""
        if not match or unit not in _UNITS:
            raise InvalidArgument(f"{name}={value!r} is not a size; {VALID}")
        number = Fraction(match.group(1))
        if number.denominator != 1 and _UNITS[unit] == 1:
            raise InvalidArgument(f"{name}={value!r} is a fraction of a byte; {VALID}")
        size = math.floor(number * _UNITS[unit])
    if not 0 <= size <= MAX_BYTES:
        raise InvalidArgument(f"{name}={value!r} is out of range: a size is 0 to {MAX_BYTES} bytes; {VALID}")
    return size
