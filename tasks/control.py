"""Control-queue tasks: decisions and scans the listener hands over, and the periodic decisions (beat)."""

from __future__ import annotations

import logging

from autooptimize.config import get_settings
from autooptimize.services.autotune import reevaluate
from autooptimize.services.budget import run_budget_tick
from autooptimize.services.hygiene.sweep import sweep_hygiene
from autooptimize.services.observe.attention import sweep_attention
from autooptimize.services.observe.changes import stale_tables
from autooptimize.services.observe.roll import observe_table, record_observe_error
from autooptimize.services.observe.scan import scan_table
from autooptimize.services.retention import apply_retention
from autooptimize.services.submit_decided import on_attention_handler
from tasks.app import app
from tasks.send import CeleryDispatch, decide_requester, take_decide_requests

log = logging.getLogger(__name__)


@app.task(name="autooptimize.decide")
def decide_partitions(table_id: int) -> int:
    """Decide every partition of the table the listener asked about since this task was sent (one task
    per table while one is queued: tasks.send.request_decide); returns how many were judged."""

    settings = get_settings()
    partitions = take_decide_requests(settings, table_id)
    handle = on_attention_handler(settings, CeleryDispatch(settings))  # records each failure, never raises
    for spec_id, partition_key in partitions:
        handle(table_id, spec_id, partition_key)
    return len(partitions)


@app.task(name="autooptimize.scan")
def scan_tables(tables: list[str]) -> int:
    """Bring each table's stats to its current snapshot (a whole scan where one is needed: first sight,
    a requested scan, a new target) and hand what needs attention to decide; returns the tables done. A
    table that fails is recorded on its cursor and handed over again by the listener later."""

    settings = get_settings()
    on_attention = decide_requester(settings)
    done = 0
    for name in tables:
        try:
            observe_table(settings, name, on_attention=on_attention)
            done += 1
        except Exception as exc:  # one table never stops the others
            log.warning("table %s: scan failed (%s: %s)", name, type(exc).__name__, exc)
            try:
                record_observe_error(settings, name, f"{type(exc).__name__}: {exc}")
            except Exception:  # the database itself may be what failed
                pass
    return done


@app.task(name="autooptimize.sweep")
def sweep() -> dict[str, int]:
    """Submit a merge for every partition at MSE ≥ T² with nothing pending (idempotent)."""

    settings = get_settings()
    return sweep_attention(settings, on_attention_handler(settings, CeleryDispatch(settings)))


@app.task(name="autooptimize.rescan_stale")
def rescan_stale() -> list[str]:
    """Safety sweep: scan every tracked table the listener has not observed within AO_RESCAN_AFTER_SECONDS."""

    settings = get_settings()
    stale = stale_tables(settings)
    for name in stale:
        scan_table(settings, name, reason="stale")
    return stale


@app.task(name="autooptimize.hygiene_sweep")
def hygiene_sweep() -> dict[str, list[str]]:
    """Submit rewrite_manifests, expire_snapshots and remove_orphans where a tracked table needs them."""

    settings = get_settings()
    return sweep_hygiene(settings, dispatch=CeleryDispatch(settings))


@app.task(name="autooptimize.retention")
def prune_state() -> dict[str, int]:
    """Remove state the AO_RETENTION_* settings no longer keep (services/retention.py)."""

    return apply_retention(get_settings())


@app.task(name="autooptimize.autotune")
def autotune() -> dict[str, str]:
    """Re-evaluate the tracked tables' suggested merge tunings from their own histories (AutoAnalyze): in
    rotation, within AO_AUTOTUNE_PASS_SECONDS, skipping tables with too few new commits."""

    return reevaluate(get_settings())


@app.task(name="autooptimize.budget_tick")
def budget_tick() -> dict[str, object]:
    """Rank the candidates waiting for the budget and submit those admitted (services/budget.py)."""

    settings = get_settings()
    return run_budget_tick(settings, CeleryDispatch(settings))
