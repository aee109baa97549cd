"""Fault-injection points of a consolidation run (tests kill the process in them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class BufferHooks:
    """Fault-injection points (tests kill the process in them); each defaults to doing nothing."""

    after_claim: Callable[[str], None] | None = None
    after_write: Callable[[list[str]], None] | None = None
    after_checkpoint: Callable[[], None] | None = None
    after_commit: Callable[[int], None] | None = None
    after_bookkeeping: Callable[[], None] | None = None


def call_hook(hook: Callable[..., None] | None, *args: Any) -> None:
    """Call ``hook`` with ``args`` unless it is None."""
    if hook is not None:
        hook(*args)
