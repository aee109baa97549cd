"""Stopping an attempt's work that is not a Spark job.

A Spark job of an attempt that must stop (timed out, lease lost) is interrupted by its tag. A group
rewritten on the pyarrow path in the worker's own threads cannot be interrupted from outside, so it
asks between batches: the attempt opens :func:`cancellable` with an event its stop callback sets,
and the rewrite calls :func:`raise_if_stopped`. The event travels with the context into the group
threads (domain/profile.carry copies it).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_event: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("ao_stop", default=None)


class AttemptStopped(RuntimeError):
    """The attempt was stopped while this work ran; its output is left for the attempt's clean-up."""


@contextmanager
def cancellable(event: threading.Event) -> Iterator[threading.Event]:
    token = _event.set(event)
    try:
        yield event
    finally:
        _event.reset(token)


def raise_if_stopped(where: str) -> None:
    event = _event.get()
    if event is not None and event.is_set():
        raise AttemptStopped(f"{where}: the attempt was stopped")
