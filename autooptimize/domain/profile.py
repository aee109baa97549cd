"""Per-phase seconds of one action, recorded in its ``timings`` (shown by ``status``, ``history``, the
console and ``benchmarks/merge.py``).

An action opens a :class:`Profile` with :func:`profiling`; code anywhere below it (planning, each
group's rewrite on any thread, verification, the commit) wraps a phase in :func:`phase`. Phases inside
groups run concurrently, so their sums are *group-seconds* and may exceed the wall time of the
``rewrite`` phase that contains them; the keys say so (``group.*``). Without an open profile,
:func:`phase` costs one context-variable lookup and records nothing.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

_current: contextvars.ContextVar[Profile | None] = contextvars.ContextVar("ao_profile", default=None)


class Profile:
    """Seconds per phase name, summed (thread-safe: groups add from their threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds


@contextmanager
def profiling() -> Iterator[Profile]:
    """Open a profile for the code in the block (and the threads it starts through :func:`carry`)."""
    profile = Profile()
    token = _current.set(profile)
    try:
        yield profile
    finally:
        _current.reset(token)


def add_seconds(name: str, seconds: float) -> None:
    """Add ``seconds`` measured elsewhere (e.g. by a Spark task) to phase ``name`` of the open profile."""
    profile = _current.get()
    if profile is not None:
        profile.add(name, seconds)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Add the block's wall seconds to phase ``name`` of the open profile, if any."""
    profile = _current.get()
    if profile is None:
        yield
        return
    started = time.monotonic()
    try:
        yield
    finally:
        profile.add(name, time.monotonic() - started)


def carry(job: Callable[[], T]) -> Callable[[], T]:
    """``job`` run in the caller's context (its open profile) on whatever thread runs it."""
    context = contextvars.copy_context()
    return lambda: context.run(job)
