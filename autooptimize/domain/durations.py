"""Durations as operators write them: ``90s``, ``45m``, ``36h``, ``7d``, ``2w`` or plain seconds."""

from __future__ import annotations

import re

from autooptimize.errors import InvalidArgument

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: object, name: str = "duration") -> int:
    """Whole seconds (≥ 0) from an int or a string such as ``7d``; InvalidArgument naming ``name`` otherwise."""
    if isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a duration such as 90m, 36h or 7d (got {value!r})")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgument(f"{name} must not be negative (got {value!r})")
        return value
    match = _DURATION_RE.match(str(value)) if isinstance(value, str | float) else None
    if match is None:
        raise InvalidArgument(f"{name} must be a duration such as 90m, 36h or 7d (got {value!r})")
    return int(float(match.group(1)) * _SECONDS[match.group(2).lower()])


def format_duration(seconds: int) -> str:
    """The largest whole unit: 604800 → ``7d``, 5400 → ``90m``."""
    for unit in ("w", "d", "h", "m"):
        if seconds and seconds % _SECONDS[unit] == 0:
            return f"{seconds // _SECONDS[unit]}{unit}"
    return f"{seconds}s"
