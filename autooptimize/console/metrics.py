"""Prometheus metrics, read from PostgreSQL and Redis at scrape time.

Nothing is counted in this process: each scrape asks PostgreSQL for the action log's figures and Redis
for the backlog, so the values are the same whichever process serves them and however many worker
processes ran the actions. A source that does not answer is reported by
``autooptimize_source_up{source}`` = 0 and its metrics are left out of that scrape.

Counters only count what never changes again: ``autooptimize_actions_total`` counts actions in a final
state; queued and running ones are the gauge ``autooptimize_actions_in_progress``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from autooptimize.config import Settings
from autooptimize.services.budget import summary as budget_summary
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import ActionState
from autooptimize.storage.readmodel import (
    REWRITE_KINDS,
    SECONDS_BUCKETS,
    action_counts,
    action_durations,
    bytes_rewritten,
    commit_conflicts,
    decision_failure_count,
    table_figures,
)
from scheduler.tenants import tenant_shares
from tasks.routing import actor_queue
from tasks.rpq import build_queue, queue_client

log = logging.getLogger(__name__)

CELERY_PRIORITY_STEPS = range(10)  # tasks.app: broker_transport_options priority_steps, separator ":"


class ServiceCollector:
    """A prometheus_client collector whose ``collect`` reads the service's state afresh."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("autooptimize_source_up", "Whether the source answered this scrape (1) or not (0)",
                               labels=["source"])
        try:
            yield from self._from_postgres()
            up.add_metric(["postgresql"], 1)
        except Exception as exc:  # a scrape must answer; the gauge says what is missing
            log.warning("metrics: PostgreSQL did not answer: %s", exc)
            up.add_metric(["postgresql"], 0)
        try:
            yield from self._from_redis()
            up.add_metric(["redis"], 1)
        except Exception as exc:
            log.warning("metrics: Redis did not answer: %s", exc)
            up.add_metric(["redis"], 0)
        try:
            yield from tenant_metrics(self.settings)
        except Exception as exc:  # both sources are reported above
            log.warning("metrics: tenant shares unavailable: %s", exc)
        yield up

    def _from_postgres(self) -> Iterator[Metric]:
        with session_scope(self.settings) as session:
            counts = action_counts(session)
            durations = action_durations(session)
            rewritten = bytes_rewritten(session)
            conflicts = commit_conflicts(session)
            failures = decision_failure_count(session)
            tables = table_figures(session, self.settings.catalog)
        done = CounterMetricFamily("autooptimize_actions", "Actions that reached a final state",
                                   labels=["kind", "state", "trigger"])
        active = GaugeMetricFamily("autooptimize_actions_in_progress", "Actions queued or running now",
                                   labels=["kind", "state", "trigger"])
        for kind, state, trigger, n in counts:
            (done if ActionState(state).terminal else active).add_metric([kind, state, trigger], n)
        seconds = HistogramMetricFamily("autooptimize_action_seconds",
                                        "Seconds from an action's first start to its finish", labels=["kind"])
        for kind, d in durations.items():
            buckets = [(_bound(b), c) for b, c in zip(SECONDS_BUCKETS, d.cumulative, strict=True)]
            seconds.add_metric([kind], buckets + [("+Inf", d.count)], d.total_seconds)
        moved = CounterMetricFamily("autooptimize_bytes_rewritten", "Input bytes of committed rewrites",
                                    labels=["kind"])
        for kind in sorted({*REWRITE_KINDS, *rewritten}):
            moved.add_metric([kind], rewritten.get(kind, 0))
        conflict = CounterMetricFamily(
            "autooptimize_commit_conflicts", "Commits that met a concurrent writer: races lost and re-applied "
            "(outcome=retried), actions aborted because their inputs changed (outcome=aborted)", labels=["outcome"])
        for outcome, n in sorted(conflicts.items()):
            conflict.add_metric([outcome], n)
        yield from (done, active, seconds, moved, conflict)
        yield CounterMetricFamily("autooptimize_decision_failures", "Partitions decide could not handle "
                                  "(decision.failed audit records)", value=failures)
        over = GaugeMetricFamily("autooptimize_partitions_over_threshold",
                                 "Partitions that need attention: error beyond the best layout their bytes "
                                 "allow of at least the tolerance squared per file", labels=["table"])
        files = GaugeMetricFamily("autooptimize_table_files", "Live data files", labels=["table"])
        small = GaugeMetricFamily("autooptimize_table_small_files", "Live data files under the target size",
                                  labels=["table"])
        size = GaugeMetricFamily("autooptimize_table_bytes", "Bytes of live data files", labels=["table"])
        for t in tables:
            over.add_metric([t.identifier], t.over_threshold)
            files.add_metric([t.identifier], t.files)
            small.add_metric([t.identifier], t.small_files)
            size.add_metric([t.identifier], t.bytes)
        yield from (over, files, small, size)
        yield from budget_metrics(self.settings)

    def _from_redis(self) -> Iterator[Metric]:
        depth, by_table, leased = queue_depths(self.settings)
        total = GaugeMetricFamily("autooptimize_queue_depth", "Actions waiting for an actor, per priority class "
                                  "(reliable queue backlog plus Celery messages not yet taken)",
                                  labels=["priority_class"])
        for cls, n in depth.items():
            total.add_metric([cls], n)
        tables = GaugeMetricFamily("autooptimize_queue_table_depth", "Reliable queue backlog per class and table",
                                   labels=["priority_class", "table"])
        for (cls, table), n in sorted(by_table.items()):
            tables.add_metric([cls, table], n)
        yield from (total, tables)
        yield GaugeMetricFamily("autooptimize_queue_in_flight", "Leases held by actors (reliable queue)",
                                value=leased)


def budget_metrics(settings: Settings) -> Iterator[Metric]:
    """The budget: its hourly core-seconds, the rolling hour's spend by source, open candidates by
    verdict, and the deferrals recorded (services/budget.py)."""
    now = budget_summary(settings)
    if now["budget"] is not None:
        yield GaugeMetricFamily("autooptimize_budget_core_seconds_per_hour",
                                "AO_BUDGET_CORE_SECONDS_PER_HOUR", value=now["budget"])
    spent = GaugeMetricFamily("autooptimize_budget_spend_core_seconds", "Core-seconds spent in the rolling hour: "
                              "candidates the budget admitted, and other actions (ad hoc, hygiene)",
                              labels=["source"])
    spent.add_metric(["admitted"], now["spent"]["admitted"])
    spent.add_metric(["other"], now["spent"]["other"])
    verdicts = GaugeMetricFamily("autooptimize_budget_candidates", "Candidates recorded by the budget, by verdict",
                                 labels=["verdict", "mode"])
    for verdict, n in sorted(now["verdicts"].items()):
        verdicts.add_metric([verdict, now["mode"]], n)
    yield from (spent, verdicts)
    yield CounterMetricFamily("autooptimize_budget_deferrals", "Times a candidate was deferred by a budget tick",
                              value=now["deferrals"])


def queue_depths(settings: Settings) -> tuple[dict[str, int], dict[tuple[str, str], int], int]:
    """Per class: the reliable queue's backlog plus messages waiting in the class's Celery actor queue
    (every priority list); the backlog per (class, table); and the leases in flight."""
    backlog = build_queue(settings).snapshot()
    depth = dict.fromkeys(settings.priority_classes, 0)
    by_table: dict[tuple[str, str], int] = {}
    for (cls, table), (count, _cost) in backlog.queues.items():
        depth[cls] = depth.get(cls, 0) + count
        by_table[(cls, table)] = count
    pipe = queue_client(settings).pipeline(transaction=False)
    keys = [(cls, actor_queue(cls) + (f":{p}" if p else "")) for cls in depth for p in CELERY_PRIORITY_STEPS]
    for _cls, key in keys:
        pipe.llen(key)
    for (cls, _key), n in zip(keys, pipe.execute(), strict=True):
        depth[cls] += int(n)
    return depth, by_table, backlog.leased


def tenant_metrics(settings: Settings) -> Iterator[Metric]:
    """Dispatches per tenant (since ever, and shares over the window beside the target) and what each has
    queued, in flight and busy (scheduler/tenants.py)."""
    status = tenant_shares(settings)
    window = status["window_minutes"]
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
        "dispatched_total": CounterMetricFamily("autooptimize_tenant_dispatched", "Actions dispatched per tenant",
                                                labels=["tenant"]),
        "dispatch_share": GaugeMetricFamily("autooptimize_tenant_dispatch_share", f"Tenant's share of the "
                                            f"dispatches of the last {window} minutes", labels=["tenant"]),
        "busy_share": GaugeMetricFamily("autooptimize_tenant_busy_share", f"Tenant's share of the actor seconds "
                                        f"of actions finished in the last {window} minutes", labels=["tenant"]),
        "target_share": GaugeMetricFamily("autooptimize_tenant_target_share", "Tenant's weight over the weights "
                                          "of the tenants active in the window", labels=["tenant"]),
        "busy_seconds": GaugeMetricFamily("autooptimize_tenant_busy_seconds", f"Actor seconds of the tenant's "
                                          f"actions finished in the last {window} minutes", labels=["tenant"]),
        "queued": GaugeMetricFamily("autooptimize_tenant_queued", "Tenant's items in the reliable queue",
                                    labels=["tenant"]),
        "in_flight": GaugeMetricFamily("autooptimize_tenant_in_flight", "Tenant's leases held by actors",
                                       labels=["tenant"]),
    }
    for row in status["tenants"]:
        for key, family in families.items():
            if row[key] is not None:
                family.add_metric([row["tenant"]], row[key])
    yield from families.values()


def metrics_text(settings: Settings) -> tuple[bytes, str]:
    """One scrape in the Prometheus text format, and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(settings))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def _bound(value: float) -> str:
    return f"{value:g}" if value != int(value) else f"{value:.1f}"
