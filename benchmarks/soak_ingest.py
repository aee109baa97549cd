"""The soak's tables and writers: small-file ingest that keeps an exact account of what it wrote.

Three tables share one schema and differ in partitioning and in the write path:

- ``soak.hourly``   ``hour(ts)``                       pyiceberg ``append``, one commit per batch
- ``soak.bucketed`` ``bucket(2, id)``, ``region``      pyiceberg ``append``, one commit per batch (one region each)
- ``soak.landed``   ``day(ts)``, ``truncate(2, device)`` buffered writes: ``land()``, consolidated by the service

Rows carry unique ids. A batch counts as ingested only once it is known to be in: an append whose call
failed (a PostgreSQL restart, a commit conflict with a merge) is looked for by its ``soak.commit-id``
snapshot property before it is tried again, so an ambiguous commit is never counted twice or lost; a
landing counts when ``land()`` returned it as landed. The expected content of a table is the one digest
(autooptimize/engines/digest.py) summed over its ingested batches.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    TruncateTransform,
)
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from autooptimize.engines.digest import DigestAccumulator

COMMIT_PROP = "soak.commit-id"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "ts", TimestamptzType(), required=True),
    NestedField(3, "region", StringType(), required=False),
    NestedField(4, "device", StringType(), required=False),
    NestedField(5, "amount", DoubleType(), required=False),
    NestedField(6, "payload", StringType(), required=False),
)
ARROW = schema_to_pyarrow(SCHEMA)
REGIONS = ("eu", "us", "apac", "latam", None)
BASE = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class SoakTable:
    identifier: str
    spec: PartitionSpec
    buffered: bool


TABLES = (
    SoakTable("soak.hourly", PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=HourTransform(), name="ts_hour")), False),
    SoakTable("soak.bucketed", PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(2), name="id_bucket"),
        PartitionField(source_id=3, field_id=1001, transform=IdentityTransform(), name="region")), False),
    SoakTable("soak.landed", PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=4, field_id=1001, transform=TruncateTransform(2), name="device_trunc")), True),
)

#: table properties: snapshots older than 2 minutes (keeping 5) are past retention, so beat's hygiene
#: sweep expires snapshots while the writers and the merges commit
TABLE_PROPERTIES = {"history.expire.max-snapshot-age-ms": "120000", "history.expire.min-snapshots-to-keep": "5"}


class Ids:
    """Unique row ids across every writer."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> int:
        with self._lock:
            first, self._next = self._next, self._next + n
            return first


def make_batch(rng: random.Random, ids: Ids, rows: int, elapsed: float) -> pa.Table:
    """``rows`` rows of one region (or none); event times move one simulated hour per real minute, a fifth
    of them late (up to 3 h)."""
    first = ids.take(rows)
    now = BASE + dt.timedelta(hours=elapsed / 60)
    times = [now - (dt.timedelta(minutes=rng.randrange(180)) if rng.random() < 0.2 else
                    dt.timedelta(seconds=rng.randrange(60))) for _ in range(rows)]
    region = rng.choice(REGIONS)
    return pa.table({
        "id": pa.array(range(first, first + rows), pa.int64()),
        "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
        "region": [region] * rows,
        "device": [None if rng.random() < 0.05 else f"{rng.choice('abcdef')}{rng.choice('xyz')}-{rng.randrange(50)}"
                   for _ in range(rows)],
        "amount": [None if rng.random() < 0.05 else round(rng.random() * 1000, 3) for _ in range(rows)],
        "payload": [f"p-{rng.getrandbits(48):012x}" for _ in range(rows)],
    }, schema=ARROW)


@dataclass
class WriterStats:
    table: str
    batches: int = 0
    rows: int = 0
    files_landed: int = 0
    rejected: list[str] = field(default_factory=list)
    retried: Counter[str] = field(default_factory=Counter)  # error type → times
    samples: dict[str, str] = field(default_factory=dict)  # error type → where the first one was raised, and why
    ambiguous_resolved: int = 0  # a failed call whose commit was found in the table after all
    unresolved: int = 0  # batches whose fate is unknown at the end (counts as a failure)
    digest: DigestAccumulator = field(default_factory=DigestAccumulator)
    id_ranges: list[tuple[int, int]] = field(default_factory=list)  # (first id, rows) of each ingested batch


class Writer(threading.Thread):
    """One table's writer: a batch every ``interval`` seconds (±50%) until ``stop`` is set; a batch in flight
    when it is set is finished (or given up after ``finish_timeout`` and counted as unresolved)."""

    def __init__(self, table: SoakTable, make_catalog: Callable[[], Catalog], land: Callable[..., dict[str, Any]],
                 staging: Path, ids: Ids, seed: int, interval: float, rows: tuple[int, int], t0: float,
                 stop: threading.Event, finish_timeout: float = 120.0) -> None:
        super().__init__(name=f"writer-{table.identifier}", daemon=True)
        self.table, self.make_catalog, self.land = table, make_catalog, land
        self.staging, self.ids, self.interval, self.rows_range, self.t0 = staging, ids, interval, rows, t0
        self.rng = random.Random(seed)
        self.stop_event, self.finish_timeout = stop, finish_timeout
        self.stats = WriterStats(table.identifier)

    def run(self) -> None:
        catalog = self.make_catalog()
        while not self.stop_event.is_set():
            data = make_batch(self.rng, self.ids, self.rng.randint(*self.rows_range), time.monotonic() - self.t0)
            done = self._land(data) if self.table.buffered else self._append(catalog, data)
            if done:
                self.stats.batches += 1
                self.stats.rows += data.num_rows
                self.stats.digest.add(data)
                self.stats.id_ranges.append((data.column("id")[0].as_py(), data.num_rows))
            self.stop_event.wait(self.interval * self.rng.uniform(0.5, 1.5))

    def _retry_wait(self, exc: BaseException, deadline: float | None) -> bool:
        """Note the error and wait a moment; False when the batch must be given up (stopping, past deadline)."""
        name = type(exc).__name__
        self.stats.retried[name] += 1
        if name not in self.stats.samples:
            ours = [f for f in traceback.extract_tb(exc.__traceback__) if "/autooptimize/" in f.filename]
            where = " → ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in ours[-3:]) or "?"
            self.stats.samples[name] = f"at {where}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        if deadline is not None and time.monotonic() > deadline:
            self.stats.unresolved += 1
            return False
        time.sleep(self.rng.uniform(0.5, 2.0))
        return True

    def _append(self, catalog: Catalog, data: pa.Table) -> bool:
        commit_id = uuid.uuid4().hex
        deadline: float | None = None
        while True:
            try:
                catalog.load_table(self.table.identifier).append(data, snapshot_properties={COMMIT_PROP: commit_id})
                return True
            except Exception as exc:  # noqa: BLE001 - every failure is retried; the catalog decides what is in
                failure = exc
            try:
                if self._committed(catalog, commit_id):
                    self.stats.ambiguous_resolved += 1
                    return True
            except Exception:  # noqa: BLE001 - unknown yet: keep asking
                pass
            if deadline is None and self.stop_event.is_set():
                deadline = time.monotonic() + self.finish_timeout
            if not self._retry_wait(failure, deadline):
                return False

    def _committed(self, catalog: Catalog, commit_id: str) -> bool:
        table = catalog.load_table(self.table.identifier)
        return any((s.summary or {}).get(COMMIT_PROP) == commit_id for s in table.metadata.snapshots)

    def _land(self, data: pa.Table) -> bool:
        path = self.staging / f"{uuid.uuid4().hex}.parquet"
        pq.write_table(data, path)
        deadline: float | None = None
        try:
            while True:
                try:
                    result = self.land(self.table.identifier, [str(path)])
                except Exception as exc:  # noqa: BLE001 - not landed (the lander gave the copy back): try again
                    if deadline is None and self.stop_event.is_set():
                        deadline = time.monotonic() + self.finish_timeout
                    if not self._retry_wait(exc, deadline):
                        return False
                    continue
                if result["landed"]:
                    self.stats.files_landed += 1
                    return True
                self.stats.rejected += [r["reason"] for r in result["rejected"]]
                return False
        finally:
            path.unlink(missing_ok=True)
