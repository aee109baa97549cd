"""Retrying after a transient failure: how many times, and how long to wait before each attempt."""

from __future__ import annotations

# Attempts after the first before an action fails for good (Celery retries, or rpq redeliveries).
MAX_RETRIES = 8
# No wait grows past five minutes: a recovered dependency is picked up soon enough.
MAX_BACKOFF_SECONDS = 300.0


def backoff_delay(base: float, attempt: int, cap: float = MAX_BACKOFF_SECONDS) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first): ``base`` doubled per attempt,
    at most ``cap``."""
    return min(cap, base * 2 ** max(0, attempt))
