"""Argument checks shared by the pure domain modules; each raises InvalidArgument naming the value."""

from __future__ import annotations

import operator

from autooptimize.errors import InvalidArgument


def positive_int(name: str, value: int) -> int:
    """``value`` as an int when it is an integer > 0."""
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{name} must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise InvalidArgument(f"{name} must be a positive integer, got {value!r}")
    return number


def non_negative_int(name: str, value: int) -> int:
    """``value`` as an int when it is an integer ≥ 0."""
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{name} must be a non-negative integer, got {value!r}") from None
    if number < 0:
        raise InvalidArgument(f"{name} must be a non-negative integer, got {value!r}")
    return number
