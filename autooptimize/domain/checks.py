"""Argument checks shared by the pure domain modules; each raises InvalidArgument naming the value."""

from __future__ import annotations

import math
import operator
import re
from typing import Any
from urllib.parse import urlsplit

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


#: The largest integer an argument may be unless it says otherwise (PostgreSQL's integer).
MAX_INT = 2**31 - 1


def bounded_float(value: Any, minimum: float, maximum: float, valid: str) -> float:
    """A number from ``minimum`` to ``maximum`` (an int, a float or its text; not NaN); InvalidArgument
    with ``valid`` (what the caller accepts, e.g. "x must be seconds from 0 to 86400") otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not minimum <= number <= maximum:
        raise InvalidArgument(f"{valid} (got {value!r})")
    return number


def bounded_int(name: str, value: Any, minimum: int, maximum: int = MAX_INT) -> int:
    """An integer from ``minimum`` to ``maximum`` from an int or its decimal text (no fraction, no bool)."""
    valid = f"{name} must be a whole number from {minimum} to {maximum}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgument(f"{valid} (got {value!r})")
    if isinstance(value, str) and not re.fullmatch(r"[ \t]*[+-]?\d{1,30}[ \t]*", value):
        raise InvalidArgument(f"{valid} (got {value!r})")
    number = int(value)
    if not minimum <= number <= maximum:
        raise InvalidArgument(f"{valid} (got {value!r})")
    return number


def check_callback_url(value: Any, name: str = "callback") -> str:
    """An ``http(s)://host[:port]/…`` URL without spaces or control characters, or ``""``."""
    valid = f"{name} must be an http:// or https:// URL with a host, such as https://hooks.example.com/ao (or '')"
    if not isinstance(value, str):
        raise InvalidArgument(f"{valid} (got {value!r})")
    if value == "":
        return value
    if re.search(r"[\x00-\x20\x7f]", value):
        raise InvalidArgument(f"{valid}; it holds spaces or control characters (got {value!r})")
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise InvalidArgument(f"{valid}; its port is not a number (got {value!r})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"{valid} (got {value!r})")
    return value


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
