"""Three tenants with weights 1:2:5 through the running dispatcher: realised shares, and an urgent action's wait.

    python -m benchmarks.tenants --redis-url redis://127.0.0.1:6379/15 [--minutes 10] [--slots 4]
                                 [--tables 10,10,10] [--probes 3] [--json]

Everything is the service's own: the real dispatcher process (``python -m scheduler.dispatcher``,
AO_DISPATCH=rpq, AO_FAIRNESS=dwrr, AO_TENANT_WEIGHTS=a=1,b=2,c=5, AO_PRIORITY_CLASSES=urgent,normal,
AO_URGENT_CLASSES=urgent, AO_DISPATCH_SLOTS=--slots), one real Celery actor worker (``autooptimize worker``,
prefork, --slots processes), PostgreSQL (a throw-away database, dropped at the end) and Redis (the
namespace ``ao:rpq`` and the actor queues of the given database are cleared: give it a database of its own).

The actions are real: ``rewrite_manifests`` on small real Iceberg tables (four identity partitions, one
manifest each), with ``manifest_threshold=1`` and a tiny ``target_manifest_size``, so every action really
rewrites the four manifests (a partition is never split) and commits a REPLACE snapshot, verified like any
other (about half a second of work on an idle machine). A rewrite per dispatch (Spark) would cost several
seconds each on this 2-core machine shared with other work, leaving too few dispatches in ten minutes for
a 5 % bound on a 12.5 % share; the metadata action is the cheapest real kind the service has.

Tenants: ``a`` and ``b`` by default (the first level of the namespace: tables ``a.*``, ``b.*``), ``c`` by
tuning (tables in namespaces ``c1`` and ``c2`` tracked with ``tenant=c``). Each tenant has the same number
of tables (default 20): sharing by table alone, as the dispatcher did before tenants, would give each a
third (printed as the baseline), and c split by namespace would be two tenants. Every table gets an action
before the dispatcher starts, and a feeder submits a new one for each table as soon as its previous one is
finished (one action per table at a time, looked for every 50 ms), so every tenant keeps items queued (with
10 tables each and the actions down to a quarter of a second, the heaviest tenant's tables were all running
or just finished in 44 % of samples: a run that does not saturate the backlog measures the feeder, not the
dispatcher); the run samples the
backlog twice a second and reports the fraction of samples in which each tenant had something queued.

Figures: dispatches and busy seconds (started to finished, clipped to the run) per tenant, their shares
beside the target (weight / 8) as a ratio. Pass/fail: every tenant's dispatch share within **relative**
±5 % of its target share (the strict reading: 12.5 % ± 0.625 points); busy-second shares, which also
depend on how long each action happened to take, within ±5 percentage points. Then ``--probes`` times an
urgent-class action is submitted into the saturated backlog. The dispatcher's log (scheduler/tenants.py)
gives when it was enqueued, when the dispatcher read the backlog it chose it from, and the tables in flight
in that backlog; a watcher reading the leases every 5 ms gives the actions running when it was queued.
"Waited for" = the slot it took (1 when every slot was busy as it was queued, else 0) plus one for every
action dispatched ahead of it; must be ≤ 1. A tenant with nothing queued in more than 5 % of the samples
fails the run too: the backlog was not saturated. Also printed: how many of the actions running when it was
queued had finished by the time the dispatcher read the backlog, and how many ms apart they finished.
Actors started together finish together; two finishes a few ms apart can both land before the dispatcher's
next read, and then the urgent action takes the first freed slot and the next item the other. Exit 1 when a bound
fails, 2 when nothing ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WEIGHTS = {"a": 1, "b": 2, "c": 5}
#: a tenant must have had something queued in at least this share of the samples (a saturated backlog)
MIN_BACKLOGGED = 0.95
NAMESPACES = {"a": ["a"], "b": ["b"], "c": ["c1", "c2"]}
OPTIONS = {"manifest_threshold": 1, "target_manifest_size": "1KiB"}
PARTITIONS = 4


def make_tables(settings: Any, tables: dict[str, int], probes: int) -> tuple[dict[str, str], list[str]]:
    """Real partitioned Iceberg tables, tracked; returns table -> tenant and the probe tables (tenant a)."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from autooptimize.iceberg.catalog import get_catalog
    from autooptimize.services.tracking import track

    catalog = get_catalog(settings)
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "k", StringType(), required=False))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="k"))
    for spaces in NAMESPACES.values():
        for ns in spaces:
            catalog.create_namespace(ns)
    owner: dict[str, str] = {}
    names = [(tenant, f"{NAMESPACES[tenant][i % len(NAMESPACES[tenant])]}.t{i:02d}")
             for tenant, n in tables.items() for i in range(n)]
    probe_tables = [f"a.probe{i}" for i in range(probes)]
    for tenant, ident in names + [("a", p) for p in probe_tables]:
        table = catalog.create_table(ident, schema=schema, partition_spec=spec)
        for p in range(PARTITIONS):
            table.append(pa.table({"id": list(range(p * 10, p * 10 + 10)), "k": [f"p{p}"] * 10}))
        # tenant c by tuning (namespaces c1, c2); a and b by their namespace
        track(settings, ident, **({"tenant": tenant} if tenant == "c" else {}))
        owner[ident] = tenant
    return {t: owner[t] for _, t in names}, probe_tables


class Feeder(threading.Thread):
    """Keeps one action queued or running per table: submits rewrite_manifests whenever a table has none."""

    def __init__(self, settings: Any, tables: list[str]) -> None:
        super().__init__(daemon=True, name="feeder")
        self.settings, self.tables, self.stop, self.submitted, self.errors = settings, tables, threading.Event(), 0, []

    def idle_tables(self) -> list[str]:
        from sqlalchemy import select

        from autooptimize.storage.db import session_scope
        from autooptimize.storage.models import Action, ActionState, TrackedTable

        with session_scope(self.settings) as session:
            busy = set(session.scalars(
                select(TrackedTable.identifier).join(Action, Action.table_id == TrackedTable.id)
                .where(Action.state.in_((ActionState.QUEUED.value, ActionState.RUNNING.value)))))
        return [t for t in self.tables if t not in busy]

    def fill(self) -> None:
        """Submit an action for every table that has none queued or running."""
        from autooptimize.services.actions import submit
        from tasks.send import CeleryDispatch

        dispatch = CeleryDispatch(self.settings)
        for table in self.idle_tables():
            submit(self.settings, table, kind="rewrite_manifests", priority="normal", options=OPTIONS,
                   dispatch=dispatch)
            self.submitted += 1

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.fill()
            except Exception as exc:  # reported at the end; the run goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop.wait(0.05)


class Sampler(threading.Thread):
    """Twice a second: which tenants have items queued, and how many leases are out."""

    def __init__(self, settings: Any, owner: dict[str, str]) -> None:
        super().__init__(daemon=True, name="sampler")
        self.settings, self.owner, self.stop = settings, owner, threading.Event()
        self.samples = 0
        self.backlogged: Counter[str] = Counter()
        self.full = 0

    def run(self) -> None:
        from tasks.rpq import build_queue

        queue = build_queue(self.settings)
        while not self.stop.wait(0.5):
            backlog = queue.snapshot()
            queued = {self.owner.get(table) for (_cls, table), (n, _c) in backlog.queues.items() if n}
            self.samples += 1
            self.backlogged.update(t for t in WEIGHTS if t in queued)
            self.full += backlog.leased >= self.settings.slots


def busy_seconds(settings: Any, owner: dict[str, str], start: float, end: float) -> dict[str, float]:
    """Seconds actions of each tenant ran (PostgreSQL's started_at..finished_at) inside [start, end]."""
    from sqlalchemy import select

    from autooptimize.storage.db import session_scope
    from autooptimize.storage.models import Action, TrackedTable

    with session_scope(settings) as session:
        rows = session.execute(select(TrackedTable.identifier, Action.started_at, Action.finished_at)
                               .join(Action, Action.table_id == TrackedTable.id)
                               .where(Action.started_at.is_not(None))).all()
    out = dict.fromkeys(WEIGHTS, 0.0)
    for ident, started, finished in rows:
        if ident in owner:
            stop = finished.timestamp() if finished else end
            out[owner[ident]] += max(0.0, min(stop, end) - max(started.timestamp(), start))
    return out


class LeaseWatch(threading.Thread):
    """Reads the queue's leases every 5 ms, keeping (time, leased item keys) for each read."""

    def __init__(self, settings: Any) -> None:
        from tasks.rpq import build_queue, queue_client

        super().__init__(daemon=True, name="lease-watch")
        self._client, self._key = queue_client(settings), f"{build_queue(settings).namespace}:lease"
        self.reads: list[tuple[float, frozenset[str]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            keys = frozenset(k.decode() for k in self._client.zrange(self._key, 0, -1))
            self.reads.append((time.time(), keys))
            self.stop.wait(0.005)

    def releases(self, tables: set[str], start: float, end: float) -> list[float]:
        """When the watch first saw each of ``tables`` without a lease, between ``start`` and ``end`` (±5 ms)."""
        seen: dict[str, float] = {}
        for at, keys in self.reads:
            if start <= at < end:
                for table in tables - {key.split("|", 1)[0] for key in keys} - set(seen):
                    seen[table] = at
        return sorted(seen.values())

    def tables_at(self, moment: float) -> set[str]:
        """Tables with a lease out at the last read before ``moment`` (item keys are table|partition|kind)."""
        keys = next((keys for at, keys in reversed(self.reads) if at <= moment), self.reads[0][1])
        return {key.split("|", 1)[0] for key in keys}


def probe_urgent(settings: Any, table: str) -> dict[str, Any]:
    """Submit an urgent action into the saturated backlog: how many of the actions running then finished
    (released their lease) before the dispatcher read the backlog it chose the urgent one from, and
    whether anything else was chosen between its enqueue and then."""
    from autooptimize.services.actions import submit, wait
    from scheduler.tenants import dispatch_log
    from tasks.send import CeleryDispatch

    watch = LeaseWatch(settings)
    watch.start()
    try:
        action_id = submit(settings, table, kind="rewrite_manifests", priority="urgent", options=OPTIONS,
                           dispatch=CeleryDispatch(settings))
        deadline = time.monotonic() + 300
        mine: dict[str, Any] | None = None
        while mine is None and time.monotonic() < deadline:
            mine = next((e for e in dispatch_log(settings, limit=200) if e["action_id"] == action_id), None)
            time.sleep(0.05)
        time.sleep(0.2)  # the watch has read past the dispatcher's choice
    finally:
        watch.stop.set()
        watch.join()
    if mine is None:
        return {"action_id": action_id, "dispatched": False}
    outcome = wait(settings, action_id, timeout=300)
    enqueued, chosen = float(mine["enqueued_at"]), float(mine["read_at"])
    others = [e for e in dispatch_log(settings, limit=200) if enqueued <= e["read_at"] < chosen and e["action_id"] != action_id]
    running = watch.tables_at(enqueued)
    # tables running when it was queued and no longer in flight in the backlog it was chosen from
    finished = running - set(mine["in_flight_tables"])
    released = watch.releases(finished, enqueued, float("inf"))  # the watch may read late on a busy machine
    return {
        "action_id": action_id, "dispatched": True, "state": outcome.get("state"), "reason": mine["reason"],
        "running_when_queued": len(running), "leases_out_when_chosen": mine["leased_before"],
        "other_dispatches_first": len(others),
        # the slot it took (none when one was free) and one more for every action dispatched ahead of it
        "waited_for": int(len(running) >= settings.slots) + len(others),
        "finished_before_chosen": len(finished),
        "finishes_ms_apart": [round(1000 * (b - a), 1) for a, b in zip(released, released[1:], strict=False)],
        "wait_seconds": round(chosen - enqueued, 3),
        "reaction_ms": round(1000 * (chosen - released[0]), 1) if released else None,
    }


class Service:
    """The dispatcher and one actor worker as subprocesses of the service's own commands."""

    def __init__(self, env: dict[str, str], home: Path, slots: int) -> None:
        self.name = f"bench-tenants-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        self.logs = [open(home / "worker.log", "ab"), open(home / "dispatcher.log", "ab")]
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "autooptimize.cli", "worker", "--queues", "ao.actor.urgent,ao.actor.normal",
             "--concurrency", str(slots), "--name", self.name, "--loglevel", "INFO"],
            env=env, cwd=REPO, stdout=self.logs[0], stderr=subprocess.STDOUT)
        self.dispatcher = subprocess.Popen([sys.executable, "-m", "scheduler.dispatcher"], env=env, cwd=REPO,
                                           stdout=self.logs[1], stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> None:
        from tasks.app import app

        deadline = time.monotonic() + timeout
        while not app.control.ping(destination=[self.name], timeout=1.0):
            if self.worker.poll() is not None or self.dispatcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker or the dispatcher did not start; see {self.logs[0].name}")

    def stop(self) -> None:
        for proc in (self.dispatcher, self.worker):
            proc.terminate()
        for proc in (self.dispatcher, self.worker):
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


def run(args: argparse.Namespace, env: dict[str, str], home: Path) -> dict[str, Any]:
    from autooptimize.config import get_settings
    from autooptimize.storage.db import upgrade
    from scheduler.tenants import dispatched_by_tenant
    from tasks.rpq import build_queue, queue_client

    settings = get_settings()
    upgrade(settings)
    build_queue(settings).clear()
    queue_client(settings).delete("ao.actor.urgent", "ao.actor.normal",
                                  *[f"ao.actor.{c}:{p}" for c in ("urgent", "normal") for p in range(1, 10)])
    tables = dict(zip(WEIGHTS, (int(n) for n in args.tables.split(",")), strict=True))
    owner, probes = make_tables(settings, tables, args.probes)
    feeder, sampler = Feeder(settings, list(owner)), Sampler(settings, owner)
    feeder.fill()  # the backlog is full before the dispatcher starts
    service = Service(env, home, args.slots)
    try:
        service.wait_ready()
        _, before = dispatched_by_tenant(settings)
        start = time.time()
        feeder.start()
        sampler.start()
        time.sleep(args.minutes * 60)
        end = time.time()
        _, after = dispatched_by_tenant(settings)
        sampler.stop.set()
        busy = busy_seconds(settings, owner, start, end)
        urgent = [probe_urgent(settings, table) for table in probes]
    finally:
        feeder.stop.set()
        service.stop()
    dispatched = {t: after.get(t, 0) - before.get(t, 0) for t in WEIGHTS}
    return summarise(args, tables, dispatched, busy, sampler, feeder, urgent, end - start)


def summarise(args: argparse.Namespace, tables: dict[str, int], dispatched: dict[str, int], busy: dict[str, float],
              sampler: Sampler, feeder: Feeder, urgent: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    total, busy_total, weight_total = sum(dispatched.values()), sum(busy.values()), sum(WEIGHTS.values())
    rows = []
    for tenant, weight in WEIGHTS.items():
        target = weight / weight_total
        share = dispatched[tenant] / total if total else 0.0
        busy_share = busy[tenant] / busy_total if busy_total else 0.0
        rows.append({
            "tenant": tenant, "weight": weight, "tables": tables[tenant], "target_share": round(target, 4),
            "table_only_share": round(tables[tenant] / sum(tables.values()), 4),
            "dispatched": dispatched[tenant], "dispatch_share": round(share, 4),
            "dispatch_ratio": round(share / target, 4), "dispatch_rel_error": round(abs(share - target) / target, 4),
            "busy_seconds": round(busy[tenant], 1), "busy_share": round(busy_share, 4),
            "busy_ratio": round(busy_share / target, 4), "busy_point_error": round(abs(busy_share - target), 4),
            "backlogged_fraction": round(sampler.backlogged[tenant] / sampler.samples, 4) if sampler.samples else 0.0,
        })
    return {
        "minutes": round(seconds / 60, 2), "slots": args.slots, "dispatched": total,
        "dispatches_per_s": round(total / seconds, 2) if seconds else 0.0,
        "all_slots_busy_fraction": round(sampler.full / sampler.samples, 4) if sampler.samples else 0.0,
        "tenants": rows,
        "max_dispatch_rel_error": max(r["dispatch_rel_error"] for r in rows),
        "max_busy_point_error": max(r["busy_point_error"] for r in rows),
        "urgent": urgent, "submitted": feeder.submitted, "feeder_errors": feeder.errors[:5],
    }


def report(result: dict[str, Any]) -> int:
    print(f"{result['minutes']} min, {result['slots']} slots, {result['dispatched']} dispatches "
          f"({result['dispatches_per_s']}/s), every slot busy in {100 * result['all_slots_busy_fraction']:.1f} % "
          "of samples")
    print(f"{'tenant':<7}{'weight':>7}{'tables':>7}{'target':>9}{'by-table':>10}{'dispatched':>11}{'share':>9}"
          f"{'ratio':>8}{'busy s':>9}{'share':>9}{'ratio':>8}{'backlogged':>12}")
    for r in result["tenants"]:
        print(f"{r['tenant']:<7}{r['weight']:>7}{r['tables']:>7}{100 * r['target_share']:>8.2f}%"
              f"{100 * r['table_only_share']:>9.2f}%{r['dispatched']:>11}{100 * r['dispatch_share']:>8.2f}%"
              f"{r['dispatch_ratio']:>8.3f}{r['busy_seconds']:>9.0f}{100 * r['busy_share']:>8.2f}%"
              f"{r['busy_ratio']:>8.3f}{100 * r['backlogged_fraction']:>11.1f}%")
    print(f"max error: dispatch shares {100 * result['max_dispatch_rel_error']:.2f} % relative (bound 5 %), "
          f"busy shares {100 * result['max_busy_point_error']:.2f} points (bound 5)")
    for u in result["urgent"]:
        if not u["dispatched"]:
            print(f"urgent {u['action_id']}: never dispatched")
            continue
        print(f"urgent: waited for {u['waited_for']} running action(s) ({u['running_when_queued']} running when "
              f"queued, {u['other_dispatches_first']} dispatched ahead of it); chosen {u['wait_seconds']} s after "
              f"it was queued, {u['reaction_ms']} ms after the watch saw the first slot free, from a backlog with "
              f"{u['leases_out_when_chosen']} leases out: {u['finished_before_chosen']} had finished by then"
              + (f" (finishes {u['finishes_ms_apart']} ms apart)" if u["finishes_ms_apart"] else "")
              + f"; {u['state']}")
    if result["feeder_errors"]:
        print("feeder errors:", *result["feeder_errors"], sep="\n  ")
    failures = []
    if result["dispatched"] == 0 or any(r["dispatched"] == 0 for r in result["tenants"]):
        print("FAIL: nothing (or nothing of some tenant) ran")
        return 2
    if result["max_dispatch_rel_error"] > 0.05:
        failures.append("a dispatch share is off by more than 5 % of its target")
    if result["max_busy_point_error"] > 0.05:
        failures.append("a busy-second share is off by more than 5 points")
    starved = [r["tenant"] for r in result["tenants"] if r["backlogged_fraction"] < MIN_BACKLOGGED]
    if starved:  # the shares then measure the feeder, not the dispatcher
        failures.append(f"tenant(s) {', '.join(starved)} had nothing queued in more than "
                        f"{100 * (1 - MIN_BACKLOGGED):.0f} % of samples: the backlog was not saturated "
                        "(give them more tables: --tables)")
    if any(not u["dispatched"] or u["waited_for"] > 1 for u in result["urgent"]):
        failures.append("an urgent action waited for more than one running action")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tenants", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--slots", type=int, default=4, help="actor processes and AO_DISPATCH_SLOTS")
    parser.add_argument("--tables", default="20,20,20", help="tables of tenants a,b,c")
    parser.add_argument("--probes", type=int, default=3, help="urgent actions submitted after the run")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15",
                        help="a Redis database of its own (its ao:rpq keys and actor queues are cleared)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the AO_HOME (worker and dispatcher logs)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.slots < 1 or args.probes < 0:
        parser.error("--minutes must be > 0, --slots ≥ 1 and --probes ≥ 0")
    db = f"ao_bench_tenants_{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="ao-bench-tenants-"))
    env = {**os.environ, "AO_REDIS_URL": args.redis_url, "AO_HOME": str(home), "AO_DISPATCH": "rpq",
           "AO_DATABASE_URL": f"postgresql+psycopg2://postgres@localhost:5432/{db}",
           "AO_PRIORITY_CLASSES": "urgent,normal", "AO_PRIORITY_WEIGHTS": "urgent=1,normal=1",
           "AO_URGENT_CLASSES": "urgent", "AO_FAIRNESS": "dwrr",
           "AO_TENANT_WEIGHTS": ",".join(f"{t}={w}" for t, w in WEIGHTS.items()),
           "AO_DISPATCH_SLOTS": str(args.slots), "AO_WORKER_CONCURRENCY": str(args.slots),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    os.environ.update({k: v for k, v in env.items() if k.startswith("AO_")})
    from sqlalchemy import create_engine

    admin = create_engine("postgresql+psycopg2://postgres@localhost:5432/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    try:
        result = run(args, env, home)
    finally:
        from autooptimize.storage.db import _engines

        for engine in _engines.values():
            engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()
        if args.keep:
            print(f"logs kept in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    code = report(result)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
