"""Control-queue tasks: periodic decisions (beat)."""

from __future__ import annotations

from autooptimize.config import get_settings
from tasks.app import app


@app.task(name="autooptimize.sweep")
def sweep() -> dict[str, int]:
    """Submit a merge for every partition at MSE ≥ T² with nothing pending (idempotent)."""
    from autooptimize.services.observe.attention import sweep_attention
    from autooptimize.services.submit_decided import on_attention_handler
    from tasks.send import CeleryDispatch

    settings = get_settings()
    return sweep_attention(settings, on_attention_handler(settings, CeleryDispatch(settings)))


@app.task(name="autooptimize.rescan_stale")
def rescan_stale() -> list[str]:
    """Safety sweep: scan every tracked table the listener has not observed within AO_RESCAN_AFTER_SECONDS."""
    from autooptimize.services.observe.changes import stale_tables
    from autooptimize.services.observe.scan import scan_table

    settings = get_settings()
    stale = stale_tables(settings)
    for name in stale:
        scan_table(settings, name, reason="stale")
    return stale


@app.task(name="autooptimize.hygiene_sweep")
def hygiene_sweep() -> dict[str, list[str]]:
    """Submit rewrite_manifests, expire_snapshots and remove_orphans where a tracked table needs them."""
    from autooptimize.services.hygiene.sweep import sweep_hygiene
    from tasks.send import CeleryDispatch

    settings = get_settings()
    return sweep_hygiene(settings, dispatch=CeleryDispatch(settings))


@app.task(name="autooptimize.retention")
def prune_state() -> dict[str, int]:
    """Remove state the AO_RETENTION_* settings no longer keep (services/retention.py)."""
    from autooptimize.services.retention import apply_retention

    return apply_retention(get_settings())


@app.task(name="autooptimize.autotune")
def autotune() -> dict[str, str]:
    """Re-evaluate every tracked table's suggested merge tuning from its own history (AutoAnalyze)."""
    from autooptimize.services.autotune import reevaluate

    return reevaluate(get_settings())


@app.task(name="autooptimize.budget_tick")
def budget_tick() -> dict[str, object]:
    """Rank the candidates waiting for the budget and submit those admitted (services/budget.py)."""
    from autooptimize.services.budget import tick
    from tasks.send import CeleryDispatch

    settings = get_settings()
    return tick(settings, CeleryDispatch(settings))
