"""Tenants through the dispatcher's real lease loop (``run_dispatcher``) on real Redis and PostgreSQL: tenants
from tracked tables (tuning ``tenant``, else the namespace), realised shares 1:2:5, a per-tenant cap, the
urgent class first, and the shares the console and /metrics read. Actors are threads that ack each lease
after a few ms (the actor side is exercised by tests/integration/test_dispatch.py and benchmarks/tenants.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from autooptimize.services import tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import TrackedTable
from scheduler.dispatcher import run_dispatcher
from scheduler.tenants import dispatch_log, dispatched_by_tenant, load_tenancy, tenant_shares
from tasks.rpq import Lease, QueueItem, build_queue, wake
from tests.integration.tables import DAY1, identifier, make_table

WORK_SECONDS = 0.03


class Actors:
    """Holds each lease WORK_SECONDS, then acks it and wakes the dispatcher; notes leases in flight per tenant."""

    def __init__(self, settings, ns: str) -> None:
        self.settings, self.ns, self.queue = settings, ns, build_queue(settings, ns)
        self.tenant_of = load_tenancy(settings).tenant
        self.lock = threading.Lock()
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.sent: list[tuple[float, Lease]] = []

    def submit(self, lease: Lease) -> None:
        tenant = self.tenant_of(lease.item.table)
        with self.lock:
            self.sent.append((time.time(), lease))
            self.running[tenant] += 1
            self.most[tenant] = max(self.most[tenant], self.running[tenant])
        timer = threading.Timer(WORK_SECONDS, self._finish, args=(tenant, lease))
        timer.daemon = True
        timer.start()

    def _finish(self, tenant: str, lease: Lease) -> None:
        with self.lock:
            self.running[tenant] -= 1
        self.queue.ack(lease)
        wake(self.settings, self.ns)


@pytest.fixture
def tenants_env(settings) -> Iterator[tuple[object, str, list[str]]]:
    """Tracked tables a.t*, b.t* (tenant by namespace) and c1.t*, c2.t* (tenant c by tuning); a namespace."""
    ns = f"test:tenants:{uuid.uuid4().hex[:8]}"
    run = uuid.uuid4().hex[:6]
    tables = [f"a{run}.t{i}" for i in range(6)] + [f"b{run}.t{i}" for i in range(6)] + \
             [f"c{run}{i % 2 + 1}.t{i}" for i in range(6)]
    with session_scope(settings) as session:
        # rebuild re-enqueues every pending action: close those other tests left pending
        session.execute(text("UPDATE ao_actions SET state = 'failed', reason = 'test_isolation' "
                             "WHERE state IN ('queued', 'running')"))
        for table in tables:
            session.add(TrackedTable(catalog=settings.catalog, identifier=table, target_file_size=1 << 20,
                                     tolerance=1 << 18, priority_class="normal", weight=1, allowed_actions=["merge"],
                                     tenant=f"c{run}" if table.startswith(f"c{run}") else None))
    variant = settings.model_copy(update={
        "dispatch": "rpq", "priority_classes": ("urgent", "normal"), "urgent_classes": ("urgent",),
        "priority_weights": "urgent=1,normal=1", "tenant_weights": f"a{run}=1,b{run}=2,c{run}=5",
        "dispatch_slots": 4, "dispatch_per_table": 1})
    yield variant, ns, tables
    build_queue(variant, ns).clear()
    with session_scope(settings) as session:
        session.execute(text("DELETE FROM ao_tracked_tables WHERE identifier = ANY(:t)"), {"t": tables})


def _fill(settings, ns: str, tables: list[str], per_table: int) -> None:
    build_queue(settings, ns).enqueue_many(
        QueueItem(f"{table}-{i}", table, f"p={i}", "merge", "normal") for table in tables for i in range(per_table))


def _dispatch_for(settings, ns: str, actors: Actors, seconds: float, during=None) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=run_dispatcher, args=(settings, stop),
                              kwargs={"namespace": ns, "idle_seconds": 0.2, "submit": actors.submit}, daemon=True)
    thread.start()
    try:
        if during is not None:
            during()
        time.sleep(seconds)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_tenants_share_by_weight_and_urgent_goes_first(tenants_env) -> None:
    settings, ns, tables = tenants_env
    run = tables[0].split(".")[0][1:]
    a, b, c = f"a{run}", f"b{run}", f"c{run}"
    assert {load_tenancy(settings).tenant(t) for t in tables} == {a, b, c}  # c1/c2 tables share tenant c
    _fill(settings, ns, tables, per_table=400)  # every tenant stays backlogged for the whole window
    actors = Actors(settings, ns)
    urgent = QueueItem("urgent-1", f"{b}.rare", "", "merge", "urgent")
    landed: list[float] = []

    def inject_urgent() -> None:
        time.sleep(2.0)  # saturated by now: every slot busy, every tenant backlogged
        build_queue(settings, ns).enqueue(urgent)
        landed.append(time.time())  # the item's enqueued_at is taken before its write reaches Redis
        wake(settings, ns)

    _dispatch_for(settings, ns, actors, 4.0, during=inject_urgent)

    window, total = dispatched_by_tenant(settings, ns)
    assert window == total and sum(total.values()) == len(actors.sent) > 100
    normal = Counter(lease.item.table.split(".")[0] for _, lease in actors.sent if lease.item.priority_class == "normal")
    counts = {a: normal[a], b: normal[b], c: normal[f"{c}1"] + normal[f"{c}2"]}
    n = sum(counts.values())
    assert max(counts.values()) < 6 * 400, f"a tenant ran out of backlog, so shares say nothing of fairness: {counts}"
    for tenant, weight in ((a, 1), (b, 2), (c, 5)):
        assert abs(counts[tenant] / n - weight / 8) <= 0.15 * weight / 8, counts  # 6 tables each: 1/3 without tenants

    log = dispatch_log(settings, ns)
    mine = next(e for e in log if e["action_id"] == "urgent-1")
    # a read begun once the enqueue had returned saw the urgent item in its backlog, so no dispatch before the
    # urgent one came from such a read (the urgent one's own read may begin earlier: after the item reached
    # Redis, before the enqueue returned; CI met that once)
    ahead = log[:log.index(mine)]
    assert all(e["read_at"] < landed[0] for e in ahead), [e for e in ahead if e["read_at"] >= landed[0]]
    assert mine["reason"] == "urgent" and mine["tenant"] == b
    # chosen from the first read that found a slot free (actors started together may free two at once)
    assert mine["leased_before"] < 4 and len(mine["in_flight_tables"]) == mine["leased_before"]

    shares = {row["tenant"]: row for row in tenant_shares(settings, ns)["tenants"]}
    assert shares[c]["weight"] == 5 and shares[c]["target_share"] == pytest.approx(5 / 8)
    assert shares[c]["dispatched"] == total[c] and shares[a]["queued"] > 0


def test_a_tenant_at_its_cap_waits_while_the_others_use_the_slots(tenants_env) -> None:
    settings, ns, tables = tenants_env
    c = tables[-1].split(".")[0][:-1]
    settings = settings.model_copy(update={"tenant_max_concurrent": f"{c}=1"})
    _fill(settings, ns, tables, per_table=40)
    actors = Actors(settings, ns)
    _dispatch_for(settings, ns, actors, 3.0)
    tenants = Counter(actors.tenant_of(lease.item.table) for _, lease in actors.sent)
    a, b = tables[0].split(".")[0], tables[6].split(".")[0]
    assert actors.most[c] == 1 and tenants[c] > 10  # capped, not starved
    assert max(actors.most[a], actors.most[b]) >= 2  # the slots c may not use went to a and b


def test_track_sets_the_tenant_and_an_empty_one_resets_it(settings, catalog) -> None:
    table = make_table(catalog, {DAY1: 1})
    ident = identifier(table)
    assert tracking.track(settings, ident, tenant="team_x")["tenant"] == "team_x"
    assert load_tenancy(settings).tenant(ident) == "team_x"
    assert tracking.track(settings, ident, tenant="")["tenant"] is None
    assert load_tenancy(settings).tenant(ident) == ident.split(".")[0]
    with pytest.raises(Exception, match="tenant must be 1-63 letters"):
        tracking.track(settings, ident, tenant="no spaces")
    assert load_tenancy(settings).tenant(ident) == ident.split(".")[0]  # a refused change wrote nothing


def test_console_and_metrics_show_shares_per_tenant_behind_auth(tenants_env, monkeypatch) -> None:
    import uvicorn

    import tasks.rpq as rpq_module
    from autooptimize.console.app import create_app
    from tests.integration.web import free_port, get, wait_until_answering

    settings, ns, tables = tenants_env
    a = tables[0].split(".")[0]
    _fill(settings, ns, tables, per_table=10)
    actors = Actors(settings, ns)
    _dispatch_for(settings, ns, actors, 1.5)
    monkeypatch.setattr(rpq_module, "NAMESPACE", ns)  # the console reads the service's namespace: this test's
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, "u", "p"), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(f"{base}/api/tenants")
        assert get(f"{base}/api/tenants")[0] == 401 and get(f"{base}/metrics")[0] == 401
        status, raw = get(f"{base}/api/tenants", ("u", "p"))
        assert status == 200, raw
        status, metrics = get(f"{base}/metrics", ("u", "p"))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    body = json.loads(raw)
    rows = {row["tenant"]: row for row in body["tenants"]}
    dispatched = Counter(actors.tenant_of(lease.item.table) for _, lease in actors.sent)
    assert {t: rows[t]["dispatched"] for t in dispatched} == dict(dispatched) and sum(dispatched.values()) > 20
    assert body["urgent_classes"] == ["urgent"] and rows[a]["weight"] == 1 and rows[a]["target_share"] == 1 / 8
    text_ = metrics.decode()
    assert f'autooptimize_tenant_dispatched_total{{tenant="{a}"}} {float(dispatched[a])}' in text_
    assert f'autooptimize_tenant_target_share{{tenant="{a}"}} 0.125' in text_
    assert "autooptimize_tenant_dispatch_share{" in text_
