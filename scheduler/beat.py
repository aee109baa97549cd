"""Celery beat: the periodic decisions, every one on the control queue.

Beat runs this module's app (``celery -A scheduler.beat beat``): the service's Celery app from
:mod:`tasks.app` with :func:`beat_schedule` added. Workers run :mod:`tasks.app`, which has no schedule.
"""

from __future__ import annotations

from typing import Any

from autooptimize.config import Settings, get_settings
from tasks.app import app
from tasks.routing import CONTROL_QUEUE

__all__ = ["SWEEP_SECONDS", "app", "beat_schedule"]

#: How often the sweeper looks for actions without a live lease (services/sweeper.py); it acts on those
#: untouched for AO_SWEEP_AFTER_SECONDS.
SWEEP_SECONDS = 60.0


def _every(task: str, seconds: float, expires: float) -> dict[str, Any]:
    # a tick that waited past ``expires`` is dropped: the next one decides with fresher state
    return {"task": task, "schedule": seconds, "options": {"queue": CONTROL_QUEUE, "expires": expires}}


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Beat's entries (Celery's ``beat_schedule``), periods from ``settings``."""
    return {
        # Recover partitions whose hand-off from the listener was lost (e.g. Redis restarted).
        "attention-sweep": _every("autooptimize.sweep", 300.0, 290),
        "rescan-stale": _every("autooptimize.rescan_stale", 600.0, 590),
        # Actions left queued or running with no live lease: re-queued, or failed past AO_MAX_ATTEMPTS.
        "action-sweep": _every("autooptimize.sweep_actions", SWEEP_SECONDS, SWEEP_SECONDS - 5),
        # Table hygiene: manifest rewrites, snapshot expiry and orphan removal per tracked table.
        "hygiene-sweep": _every("autooptimize.hygiene_sweep", float(settings.hygiene_sweep_seconds),
                                settings.hygiene_sweep_seconds - 5),
        # Bounded state: old audit records, finished actions and batches, thinned history (AO_RETENTION_*).
        "retention": _every("autooptimize.retention", float(settings.retention_sweep_seconds),
                            settings.retention_sweep_seconds - 5),
        # AutoAnalyze: a fresh suggested tuning per tracked table, applied where the owner allowed it.
        "autotune": _every("autooptimize.autotune", float(settings.autotune_seconds), settings.autotune_seconds - 5),
        # Buffered writes: age rules, the watched folder, abandoned batches.
        "buffer-tick": _every("autooptimize.buffer_tick", settings.buffer_tick_seconds,
                              settings.buffer_tick_seconds),
        # The budget's admission window: open candidates ranked by value per core-second (services/budget.py).
        "budget-tick": _every("autooptimize.budget_tick", settings.budget_tick_seconds, settings.budget_tick_seconds),
    }


app.conf.beat_schedule = beat_schedule(get_settings())
