"""Argument checks shared by the pure domain modules; each raises InvalidArgument naming the value."""

from __future__ import annotations

import math
import operator
from typing import Any

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


def positive_number(name: str, value: float) -> float:
    """``value`` as a float when it is a finite number > 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be a positive finite number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise InvalidArgument(f"{name} must be a positive finite number, got {value!r}")
    return number


def is_positive_number(value: object) -> bool:
    """True when ``value`` is an int or float, finite and > 0 (no conversion, no exception)."""
    return isinstance(value, int | float) and 0 < value < math.inf


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def bool_option(name: str, value: Any, owner: str | None = None) -> bool:
    """An action option given as a bool or as text (true/false, 1/0, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    where = f" of {owner}" if owner else ""
    raise InvalidArgument(f"option {name}{where} must be true or false (got {value!r})")
