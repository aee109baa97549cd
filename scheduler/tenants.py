"""Tenants in the running dispatcher: who each table belongs to, and the shares each tenant realises.

The directory (:class:`Tenancy`) is loaded from PostgreSQL with the table weights (a table's tuning
``tenant``, else the first level of its namespace). Shares are recorded by the dispatcher as it hands out
leases (:class:`ShareRecorder`: one pipelined round trip per dispatch, in Redis beside the queue) and
read by the console and ``/metrics`` (:func:`tenant_shares`); busy seconds come from the action log
(started to finished, for actions finished in the window), so they count what actors actually spent.

Redis keys, under the queue's namespace ``ns``:

* ``ns:tenants:dispatched`` (hash tenant -> count): every dispatch since the queue was created;
* ``ns:tenants:m:<minute>`` (hash tenant -> count): dispatches in one minute, expiring after the window;
* ``ns:dispatch-log`` (list, newest first, the last :data:`LOG_LENGTH`): one JSON line per dispatch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import func, select

from autooptimize.config import Settings
from autooptimize.domain.fairness import Pick, PickReason, default_tenant, tenant_of_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, TrackedTable
from tasks.rpq import Backlog, Lease, build_queue, queue_client

WINDOW_MINUTES = 10
LOG_LENGTH = 2000


@dataclass
class Tenancy:
    """Table -> tenant and table -> weight, as PostgreSQL last said; a table it does not know belongs to
    the first level of its namespace and weighs 1."""

    tenants: dict[str, str] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def tenant(self, table: str) -> str:
        found = self.tenants.get(table)
        return found if found is not None else default_tenant(table)

    def replace(self, other: Tenancy) -> None:
        self.tenants, self.weights = other.tenants, other.weights


def load_tenancy(settings: Settings) -> Tenancy:
    """Tenants and fair-share weights of the tracked tables of ``settings.catalog``."""
    with session_scope(settings) as session:
        rows = session.execute(
            select(TrackedTable.identifier, TrackedTable.tenant, TrackedTable.weight)
            .where(TrackedTable.catalog == settings.catalog)
        ).all()
    return Tenancy({ident: tenant_of_table(ident, tenant) for ident, tenant, _ in rows},
                   {ident: float(weight) for ident, _, weight in rows if weight > 0})


def in_flight_by_tenant(backlog: Backlog, tenant_of: Any) -> dict[str, int]:
    """Leases out per tenant (the backlog counts them per table)."""
    out: dict[str, int] = {}
    for table, leases in backlog.in_flight.items():
        if leases > 0:
            tenant = tenant_of(table)
            out[tenant] = out.get(tenant, 0) + leases
    return out


class ShareRecorder:
    """Counts dispatches per tenant in Redis (all-time and per minute) and keeps a short dispatch log."""

    def __init__(self, client: redis.Redis, namespace: str, *, window_minutes: int = WINDOW_MINUTES) -> None:
        self._client, self._ns, self._ttl = client, namespace, (window_minutes + 2) * 60

    def record(self, tenant: str, lease: Lease, pick: Pick, backlog: Backlog, read_at: float) -> None:
        """Count one dispatch chosen from ``backlog``, read at ``read_at``. An urgent pick also logs the tables
        in flight then (what it waited for can be checked against them)."""
        now = time.time()
        minute = f"{self._ns}:tenants:m:{int(now // 60)}"
        entry = {"at": now, "tenant": tenant, "table": lease.item.table, "class": lease.item.priority_class,
                 "action_id": lease.item.action_id, "reason": str(pick.reason), "leased_before": backlog.leased, "read_at": read_at,
                 "delivery": lease.deliveries, "enqueued_at": lease.item.enqueued_at}
        if pick.reason is PickReason.URGENT:
            entry["in_flight_tables"] = sorted(t for t, n in backlog.in_flight.items() if n > 0)
        pipe = self._client.pipeline(transaction=False)
        pipe.hincrby(f"{self._ns}:tenants:dispatched", tenant, 1)
        pipe.hincrby(minute, tenant, 1)
        pipe.expire(minute, self._ttl)
        pipe.lpush(f"{self._ns}:dispatch-log", json.dumps(entry, sort_keys=True))
        pipe.ltrim(f"{self._ns}:dispatch-log", 0, LOG_LENGTH - 1)
        pipe.execute()


def dispatch_log(settings: Settings, namespace: str | None = None, limit: int = LOG_LENGTH) -> list[dict[str, Any]]:
    """The latest dispatches, oldest first (at most ``limit``)."""
    ns = build_queue(settings, namespace).namespace
    raw = queue_client(settings).lrange(f"{ns}:dispatch-log", 0, max(0, limit - 1))
    return [json.loads(r) for r in reversed(raw)]


def _counts(raw: Mapping[Any, Any]) -> dict[str, int]:
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}


def dispatched_by_tenant(settings: Settings, namespace: str | None = None, *,
                         window_minutes: int = WINDOW_MINUTES) -> tuple[dict[str, int], dict[str, int]]:
    """(dispatches per tenant in the last ``window_minutes`` whole and current minutes, since ever)."""
    ns = build_queue(settings, namespace).namespace
    now_minute = int(time.time() // 60)
    pipe = queue_client(settings).pipeline(transaction=False)
    pipe.hgetall(f"{ns}:tenants:dispatched")
    for minute in range(now_minute - window_minutes + 1, now_minute + 1):
        pipe.hgetall(f"{ns}:tenants:m:{minute}")
    total, *minutes = pipe.execute()
    window: dict[str, int] = {}
    for raw in minutes:
        for tenant, n in _counts(raw).items():
            window[tenant] = window.get(tenant, 0) + n
    return window, _counts(total)


def busy_seconds_by_tenant(settings: Settings, since: float) -> dict[str, float]:
    """Seconds from start to finish of the actions that finished since ``since`` (epoch s), per tenant."""
    seconds = func.extract("epoch", Action.finished_at - Action.started_at)
    with session_scope(settings) as session:
        rows = session.execute(
            select(TrackedTable.identifier, TrackedTable.tenant, func.sum(seconds))
            .join(Action, Action.table_id == TrackedTable.id)
            .where(TrackedTable.catalog == settings.catalog, Action.started_at.is_not(None),
                   Action.finished_at >= func.to_timestamp(since))
            .group_by(TrackedTable.identifier, TrackedTable.tenant)
        ).all()
    out: dict[str, float] = {}
    for ident, tenant, total in rows:
        name = tenant_of_table(ident, tenant)
        out[name] = out.get(name, 0.0) + float(total or 0.0)
    return out


def shares(counts: Mapping[str, float]) -> dict[str, float]:
    """Each key's fraction of the total (empty when the total is 0)."""
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total > 0 else {}


def tenant_shares(settings: Settings, namespace: str | None = None, *,
                  window_minutes: int = WINDOW_MINUTES) -> dict[str, Any]:
    """Per tenant: weight, target share among the tenants active in the window, dispatches and busy seconds
    in the window (and their shares), dispatches since ever, and what is queued and in flight now."""
    tenancy = load_tenancy(settings)
    backlog = build_queue(settings, namespace).snapshot()
    window, total = dispatched_by_tenant(settings, namespace, window_minutes=window_minutes)
    busy = busy_seconds_by_tenant(settings, time.time() - window_minutes * 60)
    queued: dict[str, int] = {}
    for (_cls, table), (count, _cost) in backlog.queues.items():
        tenant = tenancy.tenant(table)
        queued[tenant] = queued.get(tenant, 0) + count
    in_flight = in_flight_by_tenant(backlog, tenancy.tenant)
    weights = settings.tenant_weight_map
    names = sorted({*tenancy.tenants.values(), *window, *total, *queued, *in_flight, *busy})
    active = [t for t in names if window.get(t) or queued.get(t) or in_flight.get(t)]
    target = shares({t: weights.get(t, 1.0) for t in active})
    by_dispatch, by_busy = shares(window), shares(busy)
    caps = settings.tenant_caps
    return {
        "window_minutes": window_minutes,
        "fairness": settings.fairness,
        "urgent_classes": list(settings.urgent_classes),
        "tenants": [{
            "tenant": t, "weight": weights.get(t, 1.0), "target_share": target.get(t),
            "dispatched": window.get(t, 0), "dispatch_share": by_dispatch.get(t),
            "busy_seconds": round(busy.get(t, 0.0), 3), "busy_share": by_busy.get(t),
            "dispatched_total": total.get(t, 0), "queued": queued.get(t, 0), "in_flight": in_flight.get(t, 0),
            "max_concurrent": caps.cap(t),
        } for t in names],
    }
