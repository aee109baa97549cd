"""Orient: the backlog per class and per table, its trend, and whether to add actors.

A sample of the backlog is kept in Redis on each look (at most one per ``sample_every`` seconds, the
last ``SAMPLES`` of them), so the trend is visible to every caller without another process.
"""

from __future__ import annotations

import time
from typing import Any

from autooptimize.config import Settings
from tasks.rpq import NAMESPACE, build_queue, queue_client

SAMPLES = 30
GROWING_SAMPLES = 4  # this many rising samples in a row, with every slot busy, means "add actors"


def queue_status(settings: Settings, namespace: str | None = None, *, sample_every: float = 10.0) -> dict[str, Any]:
    """Backlog per class and table, leases in flight, trend and a recommendation (rpq dispatch)."""
    ns = NAMESPACE if namespace is None else namespace
    backlog = build_queue(settings, ns).snapshot()
    classes: dict[str, dict[str, Any]] = {c: {"queued": 0, "tables": {}} for c in settings.priority_classes}
    for (cls, table), (count, _cost) in sorted(backlog.queues.items()):
        entry = classes.setdefault(cls, {"queued": 0, "tables": {}})
        entry["queued"] += count
        entry["tables"][table] = count
    total = sum(c["queued"] for c in classes.values())

    client = queue_client(settings)
    key = f"{ns}:backlog-samples"
    now = time.time()
    newest = client.lindex(key, 0)
    if newest is None or now - float(_text(newest).split(":")[0]) >= sample_every:
        client.lpush(key, f"{now}:{total}")
        client.ltrim(key, 0, SAMPLES - 1)
    samples = [tuple(float(x) for x in _text(raw).split(":")) for raw in client.lrange(key, 0, SAMPLES - 1)]
    samples.reverse()  # oldest first
    recent = [int(s[1]) for s in samples[-GROWING_SAMPLES:]]
    growing = len(recent) == GROWING_SAMPLES and all(b > a for a, b in zip(recent, recent[1:], strict=False))
    saturated = backlog.leased >= settings.slots
    recommendation = None
    if growing and saturated:
        span = samples[-1][0] - samples[-GROWING_SAMPLES][0]
        recommendation = (
            f"the backlog grew from {recent[0]} to {recent[-1]} items over {span:.0f} s with all "
            f"{settings.slots} slots busy: add actors (more workers, and raise AO_DISPATCH_SLOTS to match)"
        )
    return {
        "dispatch": settings.dispatch,
        "slots": settings.slots,
        "in_flight": backlog.leased,
        "in_flight_per_table": dict(sorted(backlog.in_flight.items())),
        "queued": total,
        "classes": classes,
        "trend": [{"at": t, "queued": int(q)} for t, q in samples],
        "growing": growing,
        "recommendation": recommendation,
    }


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
