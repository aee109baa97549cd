"""The fence of the work running in this thread: every catalog swap and every deletion of output asks it first.

An action attempt works under a lease with a fencing token (``services/attempt.py``), a consolidation
under its table's advisory lock (``storage/locks.py``). Each installs itself as the fence for the
duration (:func:`fenced`). The one commit loop (``iceberg/commits.py``) calls :func:`before_commit`
immediately before it asks the catalog to swap the head, and the deletions of a directory
(``iceberg/paths.delete_tree``) or of a batch of files (``iceberg/references.delete_files``) call
:func:`before_delete`. A fence raises to stop the step (``LeaseLost``: someone else may hold the work
now; ``AttemptTimedOut``: past the action timeout, no commit). Outside a fenced block both are no-ops.

The fence is a context variable: it belongs to the thread that installed it, which is the thread that
commits and cleans up (rewrite jobs run on pool threads, but they only write new files).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Fence(Protocol):
    def before_commit(self, what: str) -> None:
        """Raise unless this holder may make ``what`` visible (checked against the database, now)."""

    def before_delete(self, what: str) -> None:
        """Raise unless this holder may delete ``what``."""


_current: ContextVar[Fence | None] = ContextVar("autooptimize_fence", default=None)


@contextmanager
def fenced(fence: Fence) -> Iterator[Fence]:
    """Make ``fence`` the one every commit and deletion in this thread asks, until the block ends."""
    token = _current.set(fence)
    try:
        yield fence
    finally:
        _current.reset(token)


def before_commit(what: str) -> None:
    fence = _current.get()
    if fence is not None:
        fence.before_commit(what)


def before_delete(what: str) -> None:
    fence = _current.get()
    if fence is not None:
        fence.before_delete(what)
