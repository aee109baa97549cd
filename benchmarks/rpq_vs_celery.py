"""The dispatch path through the reliable priority queue beside a plain Celery priority queue, same Redis.

    python -m benchmarks.rpq_vs_celery [--json] [--redis-url redis://127.0.0.1:6379/15]
                                       [--items 3000] [--samples 150] [--burst 300]

Every figure has its baseline from the same run, rounds alternating so that load on the machine hits both:

* queue throughput, one client, items/s: RPQ enqueue + dequeue + ack (one call each), beside Celery's own
  Redis transport (kombu with the service's transport options: priority steps, ``queue_order_strategy``)
  publish + get + ack on the same server.
* decide-to-actor-start latency, p50 / p95 (ms), one item at a time: from the decision (RPQ: enqueue and
  wake the dispatcher; Celery: ``send_task``) to a no-op task starting in a real worker subprocess
  (``celery -A tasks.app worker``, prefork, 1 process, the service's Celery settings). The RPQ path is the
  real one: ``scheduler.dispatcher.run_dispatcher`` (fair pick, lease, send to the actor queue); the actor
  acks its lease, which frees the slot. Its part before Celery (enqueue to lease sent) is shown too.
* burst throughput, items/s: a burst of items decided at once, until the last one started in the worker.
  The dispatcher keeps at most ``AO_DISPATCH_SLOTS`` (4) leases out; plain Celery puts all in the broker.

The dispatcher needs PostgreSQL for its rebuild: a throw-away database is created and dropped.
Last line with ``--json``: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from celery import shared_task
from sqlalchemy import create_engine

from autooptimize.config import Settings, get_settings
from scheduler.dispatcher import run_dispatcher
from tasks.rpq import Lease, LeaseTicket, QueueItem, ReliablePriorityQueue, build_queue, enqueue_action, wake

REPO = Path(__file__).resolve().parents[1]
QUEUE = "ao.actor.normal"
NOOP = "bench.noop"


@shared_task(name=NOOP, ignore_result=True)
def noop(started_key: str, key: str, lease: str | None = None) -> None:
    """The trivial actor: note when it started; with a lease, ack it (freeing the dispatcher's slot)."""
    started = time.time()
    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url)
    client.rpush(started_key, json.dumps([key, started]))
    if lease is not None:
        ticket = LeaseTicket.from_json(lease)
        build_queue(settings, ticket.namespace, lease_seconds=ticket.lease_seconds).ack(ticket.lease)
        wake(settings, ticket.namespace)
    client.close()


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def queue_throughput(settings: Settings, n: int, rounds: int = 3) -> dict[str, float]:
    from kombu import Connection

    from tasks.app import app

    client = redis.Redis.from_url(settings.redis_url)
    queue = ReliablePriorityQueue(client, f"bench:rpq:{uuid.uuid4().hex[:8]}", lease_seconds=600,
                                  classes=settings.priority_classes)
    per_round = max(1, n // rounds)
    rpq_seconds = kombu_seconds = 0.0
    with Connection(settings.redis_url, transport_options=app.conf.broker_transport_options) as conn:
        simple = conn.SimpleQueue(f"bench.kombu.{uuid.uuid4().hex[:8]}")
        try:
            for r in range(rounds):
                items = [QueueItem(f"a{r}.{i}", f"db.t{i % 50}", f"p={i}", "merge", "normal") for i in range(per_round)]
                started = time.perf_counter()
                for item in items:
                    queue.enqueue(item)
                for item in items:
                    lease = queue.dequeue(item.priority_class, item.table)
                    assert lease is not None
                    queue.ack(lease)
                rpq_seconds += time.perf_counter() - started

                started = time.perf_counter()
                for i in range(per_round):
                    simple.put({"action_id": f"a{r}.{i}"}, priority=3)
                for _ in range(per_round):
                    simple.get(block=True, timeout=5).ack()
                kombu_seconds += time.perf_counter() - started
        finally:
            simple.clear()
            simple.queue.delete()  # and its bindings
            simple.close()
            queue.clear()
            client.close()
    total = per_round * rounds
    return {"rpq_items_per_s": round(total / rpq_seconds), "celery_kombu_items_per_s": round(total / kombu_seconds)}


class Worker:
    """A real Celery worker subprocess running the service's app with the no-op task included."""

    def __init__(self, settings: Settings, env: dict[str, str], log: Path) -> None:
        self.name = f"bench-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks.app", "worker", "-I", "benchmarks.rpq_vs_celery",
             "-Q", QUEUE, "-c", "1", "-n", self.name, "--loglevel", "WARNING"],
            env=env, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        from tasks.app import app

        deadline = time.monotonic() + timeout
        while not app.control.ping(destination=[self.name], timeout=1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"benchmark worker did not start; see {self._log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class Paths:
    """The two ways from a decision to the actor, sharing one worker and one Redis."""

    def __init__(self, settings: Settings) -> None:
        from tasks.app import app
        from tasks.routing import task_priority

        self.app, self.settings = app, settings
        self.priority = task_priority("normal", settings.priority_classes)
        self.ns = f"bench:dispatch:{uuid.uuid4().hex[:8]}"
        self.started_key = f"bench:started:{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(settings.redis_url)
        self.queue = build_queue(settings, self.ns)
        self.sent_at: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run_dispatcher, args=(settings, self.stop), daemon=True,
                                       kwargs={"namespace": self.ns, "submit": self._submit})
        self._n = 0

    def _submit(self, lease: Lease) -> None:
        # what tasks.send.send_leased_action does, with the no-op task in place of the merge
        self.sent_at[lease.item.action_id] = time.time()
        ticket = LeaseTicket(lease, self.ns, self.queue.lease_seconds)
        self.app.send_task(NOOP, args=[self.started_key, lease.item.action_id], kwargs={"lease": ticket.to_json()},
                           queue=QUEUE, priority=self.priority)

    def __enter__(self) -> Paths:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.queue.clear()
        self.client.delete(self.started_key)
        self.client.close()

    def _key(self) -> str:
        self._n += 1
        return f"k{self._n}"

    def celery(self, key: str) -> None:
        self.app.send_task(NOOP, args=[self.started_key, key], queue=QUEUE, priority=self.priority)

    def rpq(self, key: str) -> None:
        enqueue_action(self.settings, key, f"bench.t{self._n % 20}", f"p={self._n}", "merge", "normal",
                       namespace=self.ns)

    def started(self, timeout: float = 30) -> tuple[str, float]:
        reply = self.client.blpop([self.started_key], timeout=timeout)
        if reply is None:
            raise RuntimeError("no start reported by the worker in time")
        key, at = json.loads(reply[1])
        return str(key), float(at)

    def idle(self) -> None:
        deadline = time.monotonic() + 10
        while self.queue.in_flight() and time.monotonic() < deadline:
            time.sleep(0.001)

    def latency(self, samples: int) -> dict[str, float]:
        celery_ms: list[float] = []
        rpq_ms: list[float] = []
        hop_ms: list[float] = []
        for i in range(samples + 10):  # the first 10 of each warm up connections and the worker
            for path in ("celery", "rpq"):
                key = self._key()
                sent = time.time()
                getattr(self, path)(key)
                got, at = self.started()
                assert got == key, (got, key)
                if i >= 10:
                    (celery_ms if path == "celery" else rpq_ms).append((at - sent) * 1000)
                    if path == "rpq":
                        hop_ms.append((self.sent_at[key] - sent) * 1000)
                self.idle()
        return {
            "celery_latency_p50_ms": round(_percentile(celery_ms, 0.5), 2),
            "celery_latency_p95_ms": round(_percentile(celery_ms, 0.95), 2),
            "rpq_latency_p50_ms": round(_percentile(rpq_ms, 0.5), 2),
            "rpq_latency_p95_ms": round(_percentile(rpq_ms, 0.95), 2),
            "rpq_to_dispatch_p50_ms": round(_percentile(hop_ms, 0.5), 2),
            "rpq_to_dispatch_p95_ms": round(_percentile(hop_ms, 0.95), 2),
            "latency_samples": samples,
        }

    def burst(self, n: int, rounds: int = 2) -> dict[str, float]:
        seconds = {"celery": 0.0, "rpq": 0.0}
        for _ in range(rounds):
            for path in ("celery", "rpq"):
                started = time.time()
                for _ in range(n):
                    getattr(self, path)(self._key())
                last = max(self.started()[1] for _ in range(n))
                seconds[path] += last - started
                self.idle()
        return {"celery_burst_items_per_s": round(n * rounds / seconds["celery"]),
                "rpq_burst_items_per_s": round(n * rounds / seconds["rpq"]), "burst_items": n}


def measure(redis_url: str, items: int, samples: int, burst: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="ao-bench-rpq-"))
    db_name = f"ao_bench_rpq_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "AO_REDIS_URL": redis_url, "AO_HOME": str(home), "AO_DISPATCH": "rpq",
           "AO_DATABASE_URL": f"postgresql+psycopg2://postgres@localhost:5432/{db_name}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    # this process's Celery app (tasks.app) and the worker read the same settings: the benchmark's own
    os.environ.update({k: env[k] for k in ("AO_REDIS_URL", "AO_HOME", "AO_DISPATCH", "AO_DATABASE_URL")})
    get_settings.cache_clear()
    settings = get_settings()
    from autooptimize.storage.db import _engines, upgrade

    upgrade(settings)
    worker = None
    try:
        out: dict[str, Any] = queue_throughput(settings, items)
        worker = Worker(settings, env, home / "worker.log")
        worker.wait_ready()
        with Paths(settings) as paths:
            out.update(paths.latency(samples))
            out.update(paths.burst(burst))
        out["dispatch_slots"] = settings.dispatch_slots
        out["cpus"] = os.cpu_count()
        return out
    finally:
        if worker is not None:
            worker.stop()
        for engine in _engines.values():
            engine.dispose()
        admin = create_engine("postgresql+psycopg2://postgres@localhost:5432/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        admin.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--items", type=int, default=3000, help="items for the queue throughput")
    parser.add_argument("--samples", type=int, default=150, help="latency samples per path")
    parser.add_argument("--burst", type=int, default=300, help="items per burst")
    args = parser.parse_args(argv)
    for name in ("items", "samples", "burst"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be ≥ 1")
    out = measure(args.redis_url, args.items, args.samples, args.burst)

    def ratio(figure: float, baseline: float) -> str:
        return f"{figure / baseline:.2f}x" if baseline else "n/a"

    print(f"queue throughput, one client      RPQ enqueue+dequeue+ack {out['rpq_items_per_s']:>7} items/s   "
          f"Celery/kombu publish+get+ack {out['celery_kombu_items_per_s']:>7} items/s   "
          f"ratio {ratio(out['rpq_items_per_s'], out['celery_kombu_items_per_s'])}")
    print(f"decide-to-actor-start p50         RPQ+dispatcher {out['rpq_latency_p50_ms']:>7.2f} ms   "
          f"plain Celery {out['celery_latency_p50_ms']:>7.2f} ms   "
          f"ratio {ratio(out['rpq_latency_p50_ms'], out['celery_latency_p50_ms'])}")
    print(f"decide-to-actor-start p95         RPQ+dispatcher {out['rpq_latency_p95_ms']:>7.2f} ms   "
          f"plain Celery {out['celery_latency_p95_ms']:>7.2f} ms   "
          f"ratio {ratio(out['rpq_latency_p95_ms'], out['celery_latency_p95_ms'])}")
    print(f"  of which enqueue -> lease sent  p50 {out['rpq_to_dispatch_p50_ms']:.2f} ms, "
          f"p95 {out['rpq_to_dispatch_p95_ms']:.2f} ms ({out['latency_samples']} samples per path)")
    print(f"burst of {out['burst_items']} to one worker       RPQ+dispatcher {out['rpq_burst_items_per_s']:>7} items/s   "
          f"plain Celery {out['celery_burst_items_per_s']:>7} items/s   "
          f"ratio {ratio(out['rpq_burst_items_per_s'], out['celery_burst_items_per_s'])} "
          f"(dispatcher keeps ≤ {out['dispatch_slots']} leases out)")
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
