"""Durations as operators write them: ``90s``, ``45m``, ``36h``, ``7d``, ``2w`` or plain seconds."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from autooptimize.errors import InvalidArgument

_DURATION_RE = re.compile(r"\A[ \t]*(\d+(?:\.\d+)?)[ \t]*([smhdw]?)[ \t]*\Z", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest duration accepted (about 68 years): it fits PostgreSQL's integer and every timer.
MAX_SECONDS = 2**31 - 1


def parse_duration(value: object, name: str = "duration") -> int:
    """Whole seconds (0 to :data:`MAX_SECONDS`) from an int or a string such as ``7d`` (a fraction is
    rounded down); InvalidArgument naming ``name`` otherwise."""
    valid = f"a duration such as 90s, 45m, 36h or 7d, at most {MAX_SECONDS} seconds"
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise InvalidArgument(f"{name} must be {valid} (got {value!r})")
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION_RE.match(value if isinstance(value, str) else repr(value))
        if match is None:
            raise InvalidArgument(f"{name} must be {valid} (got {value!r})")
        seconds = math.floor(Fraction(match.group(1)) * _SECONDS[match.group(2).lower()])
    if seconds < 0:
        raise InvalidArgument(f"{name} must not be negative; use {valid} (got {value!r})")
    if seconds > MAX_SECONDS:
        raise InvalidArgument(f"{name} is too long; use {valid} (got {value!r})")
    return seconds


def format_duration(seconds: int) -> str:
    """The largest whole unit: 604800 → ``7d``, 5400 → ``90m``."""
    for unit in ("w", "d", "h", "m"):
        if seconds and seconds % _SECONDS[unit] == 0:
            return f"{seconds // _SECONDS[unit]}{unit}"
    return f"{seconds}s"
