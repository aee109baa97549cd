"""Actor tasks: take an action id, call the service, map errors to retries."""

from __future__ import annotations

import logging

from celery import Task

from autooptimize.config import get_settings
from autooptimize.errors import Retry
from autooptimize.services import actions
from tasks.app import app

log = logging.getLogger(__name__)
MAX_RETRIES = 8


@app.task(name="autooptimize.merge", bind=True, max_retries=MAX_RETRIES)
def merge(self: Task, action_id: str) -> dict:
    """Execute merge action ``action_id`` (idempotent: re-running a finished action only reports it)."""
    settings = get_settings()
    try:
        outcome = actions.execute(settings, action_id)
    except Retry as exc:
        if self.request.retries >= MAX_RETRIES:
            return actions.fail_permanently(settings, action_id, str(exc))
        raise self.retry(countdown=min(300, exc.delay * (2 ** self.request.retries)), exc=None) from None
    log.info("action %s finished: %s %s", action_id, outcome["state"], outcome.get("reason") or "")
    return {k: outcome[k] for k in ("id", "state", "reason", "files_in", "files_out", "rows_in", "rows_out",
                                    "snapshot_id")}
