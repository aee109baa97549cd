"""``autooptimize demo``: a table of small files, merged by the running service through Celery and
Spark Connect, with before/after figures read back through pyiceberg."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType, TimestamptzType

from autooptimize import api
from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument, ServiceUnavailable, WaitTimeout
from autooptimize.iceberg.catalog import get_catalog, load_table
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.processes import Stopped, StopSignals, spawn, stop_processes, stop_signals
from autooptimize.services.actions import outcome_of
from autooptimize.services.observe.attention import observed_state
from autooptimize.storage.db import session_scope, upgrade
from autooptimize.storage.repositories import recent_actions, tracked_table
from spark_actors.server import local_server_while

DEMO_TABLE = "demo.events"
SCHEMA = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "event_date", DateType(), required=True),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "user_id", LongType(), required=False),
    NestedField(5, "region", StringType(), required=False),
    NestedField(6, "amount", DoubleType(), required=False),
    NestedField(7, "payload", StringType(), required=False),
)
# partitioned by a transform, as streaming tables are: one partition per day of the event time
SPEC = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"))
ARROW = pa.schema([
    pa.field("event_id", pa.int64(), nullable=False),
    pa.field("event_date", pa.date32(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("user_id", pa.int64()),
    pa.field("region", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("payload", pa.string()),
])


#: The demo table's cold-after time: its files are all written before the service starts, so nothing
#: is gained by waiting the default 60 s for late data before the cold finish merges each partition.
DEMO_COLD_AFTER_SECONDS = 5.0


def _batch(rng: random.Random, day: dt.date, first_id: int, rows: int) -> pa.Table:
    base = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    return pa.table({
        "event_id": list(range(first_id, first_id + rows)),
        "event_date": [day] * rows,
        "ts": [base + dt.timedelta(seconds=rng.randrange(86400)) for _ in range(rows)],
        "user_id": [rng.randrange(1_000_000) for _ in range(rows)],
        "region": [rng.choice(("eu", "us", "apac", "latam")) for _ in range(rows)],
        "amount": [round(rng.random() * 100, 2) for _ in range(rows)],
        "payload": [f"evt-{rng.getrandbits(64):016x}" for _ in range(rows)],
    }, schema=ARROW)


WAREHOUSE_SCHEMES = ("file", "s3", "s3a", "gs", "abfs", "abfss")


def demo_location(warehouse: str | None) -> str | None:
    """Where ``--warehouse`` puts the demo table (None: the catalog's own warehouse); InvalidArgument
    when it is not a URI of a store pyiceberg's FileIO reaches."""
    if warehouse is None:
        return None
    scheme, sep, rest = warehouse.partition("://")
    if not sep or scheme not in WAREHOUSE_SCHEMES or not rest.strip("/"):
        raise InvalidArgument(f"--warehouse {warehouse!r} is not a warehouse URI; give one of "
                              f"{', '.join(s + '://…' for s in WAREHOUSE_SCHEMES)}, e.g. s3://lake/wh")
    return f"{warehouse.rstrip('/')}/demo/events"


def create_demo_table(settings: Settings, files: int, partitions: int, seed: int = 7,
                      location: str | None = None) -> Any:
    """(Re)create the demo table with ``files`` small files over ``partitions`` days, one commit each,
    at ``location`` (default: in the catalog's warehouse).

    Most files land in the newest day, some arrive late for older days, and sizes are uneven, like
    a streaming ingest.
    """
    catalog = get_catalog(settings)
    try:
        catalog.create_namespace("demo")
    except NamespaceAlreadyExistsError:
        pass
    try:
        catalog.purge_table(DEMO_TABLE)
    except NoSuchTableError:
        pass
    except FileNotFoundError:  # an earlier demo's files are gone (its AO_HOME was removed): forget the entry
        catalog.drop_table(DEMO_TABLE)
    table = catalog.create_table(DEMO_TABLE, schema=SCHEMA, location=location, partition_spec=SPEC)
    rng = random.Random(seed)
    days = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(partitions)]
    weights = [1 + i for i in range(partitions)]
    next_id = 0
    for i in range(files):
        # every day gets files; late arrivals keep hitting older days
        day = days[i % partitions] if i < partitions * 2 else rng.choices(days, weights)[0]
        rows = int(rng.lognormvariate(6.5, 0.8)) + 20
        table.append(_batch(rng, day, next_id, rows))
        next_id += rows
    return table


def _spawn(settings: Settings, stop: StopSignals, started: list[subprocess.Popen[bytes]], name: str,
           *args: str) -> subprocess.Popen[bytes]:
    with stop.held():  # a signal now is handled once the child is on ``started``
        proc = spawn([sys.executable, "-m", "autooptimize.cli", *args], settings.home_dir / "logs" / f"demo-{name}.log")
        started.append(proc)
    return proc


def _ensure_service(settings: Settings, stop: StopSignals, started: list[subprocess.Popen[bytes]]) -> None:
    """Start a worker when none answers, and a listener (beside a running service's listeners it takes a
    share of the tables' shards, and hands them back when stopped), each appended to ``started`` as soon
    as it runs, so the caller stops them."""
    from tasks.app import app

    _spawn(settings, stop, started, "listener", "listener")
    if settings.dispatch == "rpq":
        # a second dispatcher beside a running service's is safe (only less fair); it is stopped at the end
        _spawn(settings, stop, started, "dispatcher", "dispatcher")
    if app.control.ping(timeout=1.0):
        return
    worker = _spawn(settings, stop, started, "worker", "worker", "--name", "demo@%h")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise ServiceUnavailable(f"the demo worker exited with {worker.returncode}; see {settings.home_dir}/logs")
        if app.control.ping(timeout=1.0):
            return
    raise ServiceUnavailable("the demo worker did not answer within 60 s")


def _wait_until_optimized(settings: Settings, since: dt.datetime, timeout: float, say: Any) -> list[dict[str, Any]]:
    """Wait until the listener has seen the latest snapshot and nothing it submitted is pending (for
    three polls in a row: a merge's own commit is observed too, and may be judged again)."""
    deadline = time.monotonic() + timeout
    last = ""
    stable = 0
    while time.monotonic() < deadline:
        with session_scope(settings) as session:
            row = tracked_table(session, settings.catalog, DEMO_TABLE)
            assert row is not None
            acts = [outcome_of(a, DEMO_TABLE) for a in recent_actions(session, row.id, 500)]
        acts = [a for a in acts if a["trigger"] == "event" and dt.datetime.fromisoformat(a["created_at"]) >= since]
        pending = [a for a in acts if a["state"] in ("queued", "running")]
        current = load_table(settings, DEMO_TABLE).current_snapshot()
        caught_up = observed_state(settings, DEMO_TABLE)["snapshot_id"] == (current.snapshot_id if current else None)
        done = sum(1 for a in acts if a["state"] == "succeeded")
        line = f"  listener: {len(acts)} action(s) submitted, {done} merged, {len(pending)} pending" \
               f"{'' if caught_up else ', catching up with the commits'}"
        if line != last:
            say(line)
            last = line
        stable = stable + 1 if acts and not pending and caught_up else 0
        if stable >= 3:
            return acts
        time.sleep(1.0)
    raise WaitTimeout(f"the table was not optimized within {timeout:.0f} s; see {settings.home_dir}/logs")


def _files(table: Any) -> int:
    table.refresh()
    return len(table.inspect.files())


def run_demo(settings: Settings, *, files: int = 240, partitions: int = 4, target_size: str = "1MiB",
             as_json: bool = False, warehouse: str | None = None) -> dict[str, Any]:
    """Run the demo. SIGTERM or Ctrl-C stops it: the processes it started and the Spark Connect server (unless
    one was running before) are gone within 30 s, and it exits with 128 + the signal number."""
    with stop_signals() as stop:
        try:
            return _run_demo(settings, stop, files, partitions, target_size, as_json, demo_location(warehouse))
        except Stopped as stopped:
            raise SystemExit(128 + stopped.signum) from None


def _run_demo(settings: Settings, stop: StopSignals, files: int, partitions: int, target_size: str,
              as_json: bool, location: str | None) -> dict[str, Any]:
    if files < partitions or partitions < 1:
        raise InvalidArgument(f"--files ({files}) must be ≥ --partitions ({partitions}) ≥ 1")

    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if as_json else print
    upgrade(settings)
    say(f"creating {DEMO_TABLE} with {files} small files over {partitions} partitions …")
    started = time.monotonic()
    table = create_demo_table(settings, files, partitions, location=location)
    say(f"  written to {table.location()} in {time.monotonic() - started:.1f} s")
    api.track(DEMO_TABLE, settings=settings, target_file_size=target_size, cold_after_seconds=DEMO_COLD_AFTER_SECONDS)
    say(f"  tracked with target {target_size} and cold-after {DEMO_COLD_AFTER_SECONDS:g} s (a partition with no "
        f"write for that long is merged into its best layout; the default, "
        f"{settings.cold_after_seconds:g} s, waits for late data)")
    checksum = table_checksum(table)
    before: dict[str, Any] = {"files": _files(table), "checksum": checksum, "rows": int(checksum.split(":")[0])}
    if settings.spark_remote == "local":
        say("starting (or reusing) the local Spark Connect server …")
    # the server is stopped on leaving unless it was running before the demo; its children stop first
    with local_server_while(settings):
        say("no ad-hoc requests: the listener notices the commits, decides, and the actors merge …")
        t0 = time.monotonic()
        since = dt.datetime.now(dt.UTC)
        spawned: list[subprocess.Popen[bytes]] = []
        try:
            _ensure_service(settings, stop, spawned)
            results = _wait_until_optimized(settings, since, 900, say)
            seconds = time.monotonic() - t0
        finally:
            stop.disarm()
            stop_processes(spawned, forced=stop.forced)
    if stop.requested:  # came while the service was being stopped anyway
        raise Stopped(stop.received[0])
    checksum = table_checksum(table)
    after: dict[str, Any] = {"files": _files(table), "checksum": checksum, "rows": int(checksum.split(":")[0])}
    for r in results:
        say(f"  {r['partition']}: {r['state']} {r.get('reason') or ''} files {r['files_in']} → {r['files_out']}, "
            f"rows {r['rows_in']} → {r['rows_out']}, snapshot {r['snapshot_id']}")
    result = {
        "table": DEMO_TABLE,
        "location": table.location(),
        "files_before": before["files"],
        "files_after": after["files"],
        "rows_before": before["rows"],
        "rows_after": after["rows"],
        "checksum_before": before["checksum"],
        "checksum_after": after["checksum"],
        "bytes_rewritten": sum(r["bytes_in"] or 0 for r in results),
        "actions": len(results),
        "actions_succeeded": sum(1 for r in results if r["state"] == "succeeded"),
        "seconds": round(seconds, 2),
    }
    if as_json:
        print(json.dumps(result))
    else:
        width = max(26, len(str(before["checksum"])) + 2, len(str(after["checksum"])) + 2)
        print(f"\n{'':18}{'before':>{width}}{'after':>{width}}")
        for key in ("files", "rows", "checksum"):
            print(f"{key:18}{before[key]!s:>{width}}{after[key]!s:>{width}}")
        print(f"{'bytes rewritten':18}{result['bytes_rewritten']:>{width}}")
        print(f"{'seconds':18}{result['seconds']:>{width}}")
    return result
