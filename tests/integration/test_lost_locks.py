"""Lost locks (issue 13): every holder of an advisory lock re-checks it before each commit or destructive
step and stops once PostgreSQL has dropped it (the lock's backend terminated, as a server restart or a
dead network does); connections carry keepalives both ways and timeouts. Real PostgreSQL, Redis, Spark."""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid

import pyarrow.parquet as pq
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from autooptimize.domain.shards import shard_of
from autooptimize.services import tracking
from autooptimize.services.buffer import landing
from autooptimize.services.buffer.batch_commit import BATCH_ID_PROPERTY
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.services.buffer.hooks import BufferHooks
from autooptimize.storage.buffer_models import BufferBatch
from autooptimize.storage.db import get_engine, session_scope
from autooptimize.storage.locks import AdvisoryLock
from autooptimize.storage.observe_models import TableCursor
from scheduler.dispatcher import run_dispatcher
from scheduler.listener import Leadership, run_listener
from tasks.rpq import Lease, QueueItem, build_queue
from tests.integration.tables import DAY1, SCHEMA, SPEC, batch, identifier, make_table

_names = itertools.count()


def _terminate_lock(settings, key: str) -> int:
    """Terminate the backend holding the advisory lock ``key`` (what a restart does to every session),
    from a connection of no pool of the service's."""
    admin = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            killed = conn.execute(text("""
                SELECT count(pg_terminate_backend(pid)) FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND objsubid = 1
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:k, 0)"""), {"k": key}).scalar()
            conn.commit()
    finally:
        admin.dispose()
    return int(killed or 0)


def _take_over(settings, role: str) -> Leadership:
    """Another process takes the role once PostgreSQL has let the old holder's lock go."""
    successor = Leadership(settings, role)
    deadline = time.monotonic() + 20
    while not successor.hold():
        assert time.monotonic() < deadline, f"nobody could take {role} over"
        time.sleep(0.1)
    return successor


def test_connections_carry_keepalives_both_ways_and_timeouts(settings):
    lock = AdvisoryLock(settings, f"test.lost:{uuid.uuid4()}")
    assert lock.acquire()
    try:
        for conn in (get_engine(settings).connect(), lock._conn):
            assert conn is not None
            # the server ends the session of a dead client host (and its locks) within about a minute
            assert conn.execute(text("SHOW tcp_keepalives_idle")).scalar() == "30"
            assert conn.execute(text("SHOW tcp_keepalives_count")).scalar() == "3"
            assert conn.execute(text("SHOW statement_timeout")).scalar() != "0"
            # and the client notices a dead server, and gives up connecting
            dsn = conn.connection.dbapi_connection.get_dsn_parameters()
            assert (dsn["keepalives_idle"], dsn["connect_timeout"]) == ("30", "10")
            assert dsn["tcp_user_timeout"] == "60000"
        get_engine(settings).dispose()
    finally:
        lock.release()


def test_a_listener_that_loses_its_shards_mid_pass_writes_no_further_table(settings, catalog):
    tables = [make_table(catalog, {DAY1: 4}, rows=20, name="lost") for _ in range(3)]
    names = [identifier(t) for t in tables]
    ids = {int(tracking.track(settings, n, target_file_size=64 * 1024 * 1024)["id"]): n for n in names}
    shards = sorted({shard_of(n, settings.listener_shards) for n in names})
    seen: list[int] = []
    stolen: list[int] = []

    def on_attention(table_id: int, spec_id: int, key_: str) -> None:
        seen.append(table_id)
        if table_id in ids and not stolen:  # the first of ours: another holder takes our tables' shards
            with session_scope(settings) as s:
                stolen.extend(s.execute(text(
                    "UPDATE ao_listener_shards SET token = nextval('ao_lease_tokens'), holder = 'thief', "
                    "expires_at = clock_timestamp() + interval '1 hour', released_at = NULL "
                    "WHERE catalog = :c AND shard = ANY(:s) RETURNING shard"),
                    {"c": settings.catalog, "s": shards}).scalars())

    stop = threading.Event()
    thread = threading.Thread(target=run_listener, args=(settings, stop, 0.05, on_attention),
                              kwargs={"workers": 1}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not stolen:
            assert time.monotonic() < deadline, "the listener never observed our tables"
            time.sleep(0.05)
        time.sleep(3)  # passes the old holder would make
    finally:
        stop.set()
        thread.join(30)
        with session_scope(settings) as s:  # the thief goes: later listeners of this catalog take the shards
            s.execute(text("UPDATE ao_listener_shards SET released_at = clock_timestamp() WHERE holder = 'thief'"))
    ours = [t for t in seen if t in ids]
    assert len(set(ours)) == 1, f"the listener kept observing after losing the shards: {ours}"
    with session_scope(settings) as s:
        written = set(s.scalars(select(TableCursor.table_id).where(TableCursor.table_id.in_(list(ids)))))
    assert written == set(ours), "a cursor was written under a lost shard lease"


def test_a_dispatcher_that_loses_its_lock_hands_out_nothing_more(settings):
    ns = f"ao-lost-{uuid.uuid4().hex[:6]}"
    variant = settings.model_copy(update={"dispatch_slots": 10, "dispatch_per_table": 10})
    queue = build_queue(variant, ns)
    for n in range(4):
        queue.enqueue(QueueItem(f"lost-{n}", "db.lost", f"p={n}", "merge", settings.priority_classes[-1]))
    sent: list[str] = []
    successor: list[Leadership] = []

    def submit(lease: Lease) -> None:
        sent.append(lease.item.action_id)
        if not successor:  # right after its first lease, PostgreSQL drops the dispatcher's lock
            assert _terminate_lock(settings, f"autooptimize.dispatcher:{ns}:{settings.catalog}") == 1
            successor.append(_take_over(settings, f"dispatcher:{ns}"))

    stop = threading.Event()
    thread = threading.Thread(target=run_dispatcher, args=(variant, stop),
                              kwargs={"namespace": ns, "submit": submit, "idle_seconds": 0.2}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not successor:
            assert time.monotonic() < deadline, "the dispatcher never handed anything out"
            time.sleep(0.05)
        time.sleep(2)
    finally:
        stop.set()
        thread.join(30)
        for lead in successor:
            lead.release()
        queue.clear()
    assert len(sent) == 1, f"the dispatcher kept handing out leases after losing its lock: {sent}"


@pytest.mark.spark
def test_a_consolidator_that_loses_its_lock_does_not_commit_and_the_next_one_does_once(settings, spark, catalog,
                                                                                        tmp_path):
    table = catalog.create_table(f"test.lostbuf_{next(_names)}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = identifier(table)
    files = []
    for i in range(4):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(batch(i * 20, 20, DAY1), path)
        files.append(path)
    landing.land(settings, ident, files)
    buffer_table = landing.table_info(settings, ident).buffer_table_id
    key = f"ao.consolidate:{buffer_table}"
    dropped: list[int] = []

    def drop_the_lock() -> None:  # the batch is written and checkpointed; its commit comes next
        dropped.append(_terminate_lock(settings, key))

    out = consolidate_table(settings, ident, spark=spark, flush=True, hooks=BufferHooks(after_checkpoint=drop_the_lock))
    assert dropped == [1]
    assert out["busy"] and out.get("lost"), out
    assert table.refresh().current_snapshot() is None, "a consolidator without its lock committed"
    with session_scope(settings) as s:
        states = list(s.scalars(select(BufferBatch.state).where(BufferBatch.buffer_table_id == buffer_table)))
    assert states == ["written"], "the batch is left, checkpointed, for the next holder"

    again = consolidate_table(settings, ident, spark=spark)
    assert [b["state"] for b in again["batches"]] == ["done"]
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.current_snapshot().summary[BATCH_ID_PROPERTY] == again["batches"][0]["batch"]
    assert sorted(table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()) == list(range(80))
