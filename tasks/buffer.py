"""Buffered-writes tasks: consolidate a table's buffer, and beat's periodic tick."""

from __future__ import annotations

import logging

from celery import Task

from autooptimize.config import get_settings
from autooptimize.errors import Retry, ServiceUnavailable
from autooptimize.services.buffer.consolidate import consolidate_table, tick
from tasks.app import app
from tasks.retry import MAX_RETRIES, backoff_delay
from tasks.send import CeleryDispatch

log = logging.getLogger(__name__)


@app.task(name="autooptimize.consolidate", bind=True, max_retries=MAX_RETRIES)
def consolidate(self: Task, table: str, flush: bool = False) -> dict:
    """Finish abandoned batches of ``table`` and consolidate while its rules fire (idempotent)."""
    settings = get_settings()
    try:
        result = consolidate_table(settings, table, flush=flush, dispatch=CeleryDispatch(settings))
    except (Retry, ServiceUnavailable) as exc:  # a service away (the catalog, PostgreSQL, Spark): later
        log.warning("consolidation of %s will be retried: %s", table, exc)
        delay = exc.delay if isinstance(exc, Retry) else 10.0
        raise self.retry(countdown=backoff_delay(delay, self.request.retries), exc=None) from None
    log.info("consolidated %s: %d batch(es)%s", table, len(result["batches"]), " (busy)" if result["busy"] else "")
    return {"table": table, "busy": result["busy"],
            "batches": [{k: b[k] for k in ("batch", "state", "files", "rows_out", "snapshot_id")}
                        for b in result["batches"]]}


@app.task(name="autooptimize.buffer_tick")
def buffer_tick() -> dict:
    """Land settled files from the watched folder; queue consolidations whose rules fire."""
    settings = get_settings()
    return tick(settings, CeleryDispatch(settings))
