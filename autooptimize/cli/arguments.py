"""Argument types of the command line for the values no service checks (timeouts, intervals, counts,
log levels, worker names, the shape of ``--option``): a bad one stops the command as it is parsed,
before anything is read or written (argparse prints ``argument --NAME: why`` and exits 2). Tables,
partitions, sizes, durations and action options are checked by the services, for the CLI and the
Python API alike."""

from __future__ import annotations

import argparse
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from autooptimize.domain.checks import bounded_int
from autooptimize.errors import AutoOptimizeError
from autooptimize.services.kinds import KINDS

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _checked(check: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a check that raises our errors (argparse shows the message as it is)."""

    def convert(text: str) -> Any:
        try:
            return check(text)
        except (AutoOptimizeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def count(minimum: int, maximum: int = 2**31 - 1) -> Callable[[str], int]:
    """A whole number from ``minimum`` to ``maximum``."""
    return _checked(lambda text: bounded_int("value", text, minimum, maximum), "count")


def seconds(text: str) -> float:
    """A positive, finite number of seconds (at most 2**31 - 1)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 2**31 - 1):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds (such as 30 or 0.5)")
    return seconds


def kinds(text: str) -> str:
    """Comma-separated action kinds."""
    given = [t.strip() for t in text.split(",") if t.strip()]
    bad = [k for k in given if k not in KINDS]
    if not given or bad:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of action kinds; valid: {', '.join(KINDS)}")
    return ",".join(given)


def option(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of an action option; the name's dashes become underscores."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", key):
        raise argparse.ArgumentTypeError(f"{text!r} must look like name=value, e.g. min-age=3d")
    return key, value.strip()


def log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS or not isinstance(logging.getLevelName(level), int):
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level; valid: {', '.join(LOG_LEVELS)}")
    return level


def node_name(text: str) -> str:
    """A Celery node name such as ``actor1@%h``."""
    if not re.fullmatch(r"[A-Za-z0-9_.%@\-]{1,100}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker name; use letters, digits and _ . - @ %, "
                                         "such as actor1@%h")
    return text

