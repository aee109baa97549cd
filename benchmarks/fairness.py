"""Fair dispatch and RPQ throughput against a real Redis, each figure beside its FIFO / plain-list baseline.

    python -m benchmarks.fairness [--json] [--redis-url redis://127.0.0.1:6379/14]

Scenarios (all through :class:`scheduler.dispatcher.Dispatcher` on a real Redis, in a throwaway namespace):

* saturation: classes high/normal/low weighted 6:3:1 (plus an idle urgent class), 50 tables spread
  17/17/16 over them, every fifth table of weight 2, every queue backlogged; 8 actor slots, at most 2
  actions per table, actors finishing in the order they started. Shares are measured over 10,000
  dispatches; the error is the largest relative deviation from the weighted share. Baseline: one FIFO
  queue fed the same backlog in the same (shuffled) order.
* burst: in the same saturated system a table receives 5,000 items, then a new table enqueues one item
  in the same class; its delay is the number of dispatches until it leaves the queue, counting its own.
  Asserted bound: ``FairScheduler.fair_wait_bound`` (ceil(P / q_class) x R: 40, 80 and 210 dispatches
  for high, normal, low here). Also a 5,000-item flood in the urgent class over 100 tables, which
  fixed-priority preemption alone would let starve everyone: the bound there is aging's
  ``max_wait + queues`` (300 + 151).
  Baseline: FIFO, where the newcomer waits behind the whole burst.
* throughput: enqueue + dequeue + ack, one call each, items/s; baseline the classic Redis reliable list
  (LPUSH, LMOVE to a processing list, LREM) on the same server.

Exits 1 if a share error exceeds 5% or a delay exceeds its bound. Last line with ``--json``: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable

import redis

from autooptimize.domain.fairness import FairScheduler, PriorityClass
from scheduler.dispatcher import Dispatcher
from tasks.rpq import Lease, QueueItem, ReliablePriorityQueue

CLASSES = [
    PriorityClass("urgent", 1, urgent=True),
    PriorityClass("high", 6),
    PriorityClass("normal", 3),
    PriorityClass("low", 1),
]
FAIR = ["high", "normal", "low"]
WEIGHTS = {"high": 6, "normal": 3, "low": 1}
SLOTS, PER_TABLE, MAX_WAIT = 8, 2, 300
TOLERANCE = 0.05


def tables_of(n: int) -> dict[str, str]:
    return {f"db.t{i:02d}": FAIR[i % 3] for i in range(n)}


def table_weights(tables: dict[str, str]) -> dict[str, float]:
    return {t: 2.0 for i, t in enumerate(tables) if i % 5 == 0}


class Harness:
    """A queue, a dispatcher and simulated actors that finish in the order they started."""

    def __init__(self, client: redis.Redis, tables: dict[str, str]) -> None:
        self.queue = ReliablePriorityQueue(client, f"bench:rpq:{uuid.uuid4().hex[:8]}", lease_seconds=600)
        self.scheduler = FairScheduler(CLASSES, table_weights=table_weights(tables), max_wait=MAX_WAIT)
        self.running: list[Lease] = []
        self.log: list[Lease] = []
        self.dispatcher = Dispatcher(self.queue, self.scheduler, self._submit, slots=SLOTS, per_table=PER_TABLE)

    def _submit(self, lease: Lease) -> None:
        self.running.append(lease)
        self.log.append(lease)

    def step(self) -> Lease:
        """One dispatch; when every slot is busy the oldest action finishes first."""
        if len(self.running) >= SLOTS:
            self.queue.ack(self.running.pop(0))
        while True:
            lease = self.dispatcher.dispatch_once()
            if lease is not None:
                return lease
            if not self.running:
                raise RuntimeError("nothing to dispatch: the scenario ran out of backlog")
            self.queue.ack(self.running.pop(0))

    def until(self, done: Callable[[Lease], bool]) -> int:
        """Dispatches until ``done`` holds for a dispatched lease, counting that one."""
        count = 0
        while True:
            count += 1
            if done(self.step()):
                return count

    def close(self) -> None:
        self.queue.clear()


def backlog_items(tables: dict[str, str], per_table: int, rng: random.Random) -> list[QueueItem]:
    items = [QueueItem(f"a-{t}-{p}", t, f"p={p}", "merge", c) for t, c in tables.items() for p in range(per_table)]
    rng.shuffle(items)  # arrival order: interleaved, as decisions come in
    base = time.time() - 3600
    return [QueueItem(i.action_id, i.table, i.partition, i.kind, i.priority_class, enqueued_at=base + n * 1e-3)
            for n, i in enumerate(items)]


def share_errors(served: Counter[tuple[str, str]], tables: dict[str, str]) -> tuple[float, float, float]:
    """(class error, table error vs weighted share, spread among equal-weight tables of a class)."""
    weights = table_weights(tables)
    total = sum(served.values())
    by_class = Counter({c: 0 for c in FAIR})
    for (cls, _), n in served.items():
        by_class[cls] += n
    class_err = max(abs(by_class[c] / (total * WEIGHTS[c] / 10) - 1) for c in FAIR)
    table_err = spread = 0.0
    for cls in FAIR:
        members = [t for t, c in tables.items() if c == cls]
        wsum = sum(weights.get(t, 1.0) for t in members)
        for t in members:
            expected = by_class[cls] * weights.get(t, 1.0) / wsum
            table_err = max(table_err, abs(served[(cls, t)] / expected - 1))
        for w in {weights.get(t, 1.0) for t in members}:
            counts = [served[(cls, t)] for t in members if weights.get(t, 1.0) == w]
            mean = sum(counts) / len(counts)
            spread = max(spread, max(abs(n / mean - 1) for n in counts))
    return class_err, table_err, spread


def saturation(client: redis.Redis, n_tables: int, dispatches: int, out: dict) -> None:
    tables = tables_of(n_tables)
    rng = random.Random(42)
    per_table = dispatches // n_tables * 4
    items = backlog_items(tables, per_table, rng)
    harness = Harness(client, tables)
    try:
        started = time.perf_counter()
        harness.queue.enqueue_many(items)
        out["enqueue_many_items_per_s"] = round(len(items) / (time.perf_counter() - started))
        started = time.perf_counter()
        served: Counter[tuple[str, str]] = Counter()
        for _ in range(dispatches):
            lease = harness.step()
            served[(lease.item.priority_class, lease.item.table)] += 1
        out["dispatches_per_s"] = round(dispatches / (time.perf_counter() - started))
        assert len(harness.running) <= SLOTS
        fifo = Counter((i.priority_class, i.table) for i in items[:dispatches])
        out["class_share_error_max"], out["table_share_error_max"], out["equal_weight_spread_max"] = (
            round(x, 4) for x in share_errors(served, tables)
        )
        out["baseline_fifo_class_share_error_max"], out["baseline_fifo_table_share_error_max"], _ = (
            round(x, 4) for x in share_errors(fifo, tables)
        )
        by_class: Counter[str] = Counter()
        for (cls, _), n in served.items():
            by_class[cls] += n
        out["class_shares"] = {c: round(by_class[c] / dispatches, 4) for c in FAIR}
    finally:
        harness.close()


def bursts(client: redis.Redis, n_tables: int, out: dict) -> None:
    tables = tables_of(n_tables)
    rng = random.Random(7)
    delays: dict[str, int] = {}
    bounds: dict[str, float] = {}
    for scenario in [*FAIR, "urgent-flood"]:
        harness = Harness(client, tables)
        try:
            harness.queue.enqueue_many(backlog_items(tables, 60, rng))
            for _ in range(rng.randrange(50, 250)):  # join the rounds at an arbitrary point
                harness.step()
            if scenario == "urgent-flood":  # spread over 100 tables so per-table limits cannot stem it
                burst = (QueueItem(f"flood-{p}", f"db.flood{p % 100:02d}", f"p={p}", "merge", "urgent") for p in range(5000))
            else:
                burst = (QueueItem(f"burst-{p}", "db.burst", f"p={p}", "merge", scenario) for p in range(5000))
            harness.queue.enqueue_many(burst)
            for _ in range(rng.randrange(1, 30)):
                harness.step()
            newcomer_class = "low" if scenario == "urgent-flood" else scenario
            harness.queue.enqueue(QueueItem("newcomer", "db.newcomer", "p=0", "merge", newcomer_class))
            delays[scenario] = harness.until(lambda lease: lease.item.action_id == "newcomer")
            if scenario == "urgent-flood":
                queues = n_tables + 100 + 1  # every table's queue, the flood's and the newcomer's
                bounds[scenario] = harness.scheduler.aged_wait_bound(queues)
            else:
                others = [t for t, c in tables.items() if c == scenario] + ["db.burst"]
                bounds[scenario] = harness.scheduler.fair_wait_bound(scenario, "db.newcomer", others, FAIR)
        finally:
            harness.close()
    out["burst_delay_max"] = max(delays.values())
    out["burst_delays"] = delays
    out["burst_delay_bounds"] = bounds
    out["baseline_fifo_burst_delay"] = 5000 + 1  # FIFO: the newcomer waits behind the whole burst


def throughput(client: redis.Redis, n: int, out: dict, rounds: int = 3) -> None:
    """Alternate RPQ and plain-list rounds so that load on the machine hits both alike."""
    queue = ReliablePriorityQueue(client, f"bench:rpq:{uuid.uuid4().hex[:8]}", lease_seconds=600)
    pending, processing = f"bench:list:{uuid.uuid4().hex[:8]}", f"bench:list:{uuid.uuid4().hex[:8]}:p"
    per_round = max(1, n // rounds)
    items = [QueueItem(f"a{i}", f"db.t{i % 50}", f"p={i}", "merge", "normal") for i in range(per_round)]
    rpq_seconds = list_seconds = 0.0
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            for item in items:
                queue.enqueue(item)
            for item in items:
                lease = queue.dequeue("normal", item.table)
                assert lease is not None
                queue.ack(lease)
            rpq_seconds += time.perf_counter() - started
            started = time.perf_counter()
            for item in items:
                client.lpush(pending, item.to_json())
            for _ in items:
                payload = client.lmove(pending, processing, "RIGHT", "LEFT")
                client.lrem(processing, 1, payload)  # type: ignore[arg-type]
            list_seconds += time.perf_counter() - started
    finally:
        queue.clear()
        client.delete(pending, processing)
    rpq, baseline = per_round * rounds / rpq_seconds, per_round * rounds / list_seconds
    out["rpq_items_per_s"] = round(rpq)
    out["baseline_list_items_per_s"] = round(baseline)
    out["rpq_vs_list_ratio"] = round(rpq / baseline, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--dispatches", type=int, default=10_000)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--throughput-items", type=int, default=5_000)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(args.redis_url)
    out: dict = {"dispatches": args.dispatches, "tables": args.tables, "weights": WEIGHTS,
                 "slots": SLOTS, "per_table": PER_TABLE, "max_wait_dispatches": MAX_WAIT}
    started = time.perf_counter()
    saturation(client, args.tables, args.dispatches, out)
    bursts(client, args.tables, out)
    throughput(client, args.throughput_items, out)
    out["seconds"] = round(time.perf_counter() - started, 1)

    def ratio(figure: float, baseline: float) -> str:
        return f"{baseline / figure:.0f}x better" if figure else "exact"

    print(f"saturation over {args.dispatches} dispatches, {args.tables} tables, weights 6:3:1 "
          f"(slots {SLOTS}, {PER_TABLE} per table); shares {out['class_shares']}")
    print(f"  class share error max   {out['class_share_error_max']:.2%}   FIFO baseline "
          f"{out['baseline_fifo_class_share_error_max']:.2%}  "
          f"({ratio(out['class_share_error_max'], out['baseline_fifo_class_share_error_max'])})")
    print(f"  table share error max   {out['table_share_error_max']:.2%}   FIFO baseline "
          f"{out['baseline_fifo_table_share_error_max']:.2%}  "
          f"({ratio(out['table_share_error_max'], out['baseline_fifo_table_share_error_max'])})")
    print(f"  equal-weight spread max {out['equal_weight_spread_max']:.2%}")
    print(f"  dispatch rate           {out['dispatches_per_s']} dispatches/s (Redis snapshot + lease + ack)")
    for scenario, delay in out["burst_delays"].items():
        print(f"burst 5000 -> {scenario:12s} newcomer served after {delay:4d} dispatches "
              f"(bound {out['burst_delay_bounds'][scenario]:.0f}; FIFO baseline {out['baseline_fifo_burst_delay']})")
    print(f"RPQ enqueue+dequeue+ack   {out['rpq_items_per_s']} items/s, plain reliable list "
          f"{out['baseline_list_items_per_s']} items/s (ratio {out['rpq_vs_list_ratio']}); "
          f"pipelined enqueue {out['enqueue_many_items_per_s']} items/s")

    failures = []
    if out["class_share_error_max"] > TOLERANCE:
        failures.append(f"class share error {out['class_share_error_max']} > {TOLERANCE}")
    if out["table_share_error_max"] > TOLERANCE:
        failures.append(f"table share error {out['table_share_error_max']} > {TOLERANCE}")
    for scenario, delay in out["burst_delays"].items():
        if delay > out["burst_delay_bounds"][scenario]:
            failures.append(f"{scenario} delay {delay} > bound {out['burst_delay_bounds'][scenario]}")
    out["ok"] = not failures
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
