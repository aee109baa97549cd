"""Control-queue tasks: periodic decisions (beat)."""

from __future__ import annotations

from autooptimize.config import get_settings
from tasks.app import app


@app.task(name="autooptimize.sweep")
def sweep() -> dict[str, int]:
    """Submit a merge for every partition at MSE ≥ T² with nothing pending (idempotent)."""
    from autooptimize.services.decide import on_attention_handler
    from autooptimize.services.observe import sweep_attention

    settings = get_settings()
    return sweep_attention(settings, on_attention_handler(settings))
