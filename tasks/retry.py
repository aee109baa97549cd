"""Retrying after a transient failure: how many times, and how long to wait before each attempt."""

from __future__ import annotations

# Celery retries of one message (a consolidation, or an action delivery waiting for its lease holder or
# for PostgreSQL) before the message is dropped. An action never fails for this: AO_MAX_ATTEMPTS counts
# its attempts in PostgreSQL (services/execution.py), and the sweeper re-queues an action whose message
# was dropped (services/sweeper.py).
MAX_RETRIES = 8
# No wait grows past five minutes: a recovered dependency is picked up soon enough.
MAX_BACKOFF_SECONDS = 300.0


def backoff_delay(base: float, attempt: int, cap: float = MAX_BACKOFF_SECONDS) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first): ``base`` doubled per attempt,
    at most ``cap``."""
    return min(cap, base * 2 ** max(0, attempt))
