"""Fencing (issue 13): every attempt holds the action's lease with a fencing token; a duplicate delivery
never touches the live attempt's work, and a holder that lost its lease commits, deletes and records
nothing. Real PostgreSQL, Redis, Spark Connect server and Iceberg tables."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from autooptimize.domain.actions import Hooks
from autooptimize.domain.fencing import fenced
from autooptimize.errors import ActionBusy, LeaseLost, Retry
from autooptimize.iceberg import paths
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.iceberg.references import delete_files
from autooptimize.services import actions, tracking
from autooptimize.services.attempt import HeldLease
from autooptimize.services.execution import claim
from autooptimize.storage import leases
from autooptimize.storage.db import session_scope
from autooptimize.storage.locks import AdvisoryLock
from autooptimize.storage.repositories import audit_events
from tasks.actions import ACTION_TASKS
from tasks.retry import MAX_RETRIES
from tasks.rpq import LeaseTicket, QueueItem, build_queue
from tests.integration.tables import DAY1, action_outputs, identifier, live_files, make_table

pytestmark = pytest.mark.spark


def _commits(table, action_id: str) -> list[int]:
    table.refresh()
    return [s.snapshot_id for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _events(settings, action_id: str) -> list[str]:
    with session_scope(settings) as s:
        return [e.event for e in audit_events(s, action_id)]


class PausedHolder:
    """``actions.execute`` on a thread, paused right before its commit (its output written and
    checkpointed) until :meth:`resume`."""

    def __init__(self, settings, action_id: str, spark) -> None:
        self.reached, self._go = threading.Event(), threading.Event()
        self.result: dict = {}

        def pause() -> None:
            self.reached.set()
            assert self._go.wait(300), "never resumed"

        def run() -> None:
            try:
                self.result["outcome"] = actions.execute(settings, action_id, spark=spark,
                                                         hooks=Hooks(before_commit=pause))
            except BaseException as exc:  # reported by the test
                self.result["error"] = exc

        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> PausedHolder:
        self.thread.start()
        assert self.reached.wait(300), f"the holder never reached its commit: {self.result}"
        return self

    def resume(self) -> dict:
        self._go.set()
        self.thread.join(300)
        assert not self.thread.is_alive()
        return self.result

    def __exit__(self, *exc: object) -> None:
        self._go.set()
        self.thread.join(300)


def _action(settings, catalog, rows: int = 50, files: int = 4):
    table = make_table(catalog, {DAY1: files}, rows=rows)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return table, actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)


@pytest.mark.parametrize("mode", ["celery", "rpq"])
def test_a_duplicate_delivery_after_its_retries_leaves_the_live_attempt_alone(settings, spark, catalog, mode):
    """Redis redelivers a long action's message; the duplicate has used up its retries. It must not fail
    the action, remove the live attempt's output or give its queue item away."""
    table, action_id = _action(settings, catalog)
    before = set(live_files(table))
    ns = f"test:fence:{uuid.uuid4().hex[:8]}"
    queue = build_queue(settings, ns)
    with PausedHolder(settings, action_id, spark) as holder:
        written = action_outputs(table)
        assert written, "the holder wrote its output"
        if mode == "celery":
            dup = ACTION_TASKS["merge"].apply(kwargs={"action_id": action_id}, retries=MAX_RETRIES).get()
        else:  # the item came back to the queue (its queue lease ran out) and was delivered many times
            item = QueueItem(action_id, identifier(table), "p", "merge", settings.priority_classes[-1])
            queue.enqueue(item)
            for _ in range(MAX_RETRIES):
                queue.nack(queue.dequeue(item.priority_class, item.table))
            lease = queue.dequeue(item.priority_class, item.table)
            assert lease.deliveries == MAX_RETRIES + 1
            ticket = LeaseTicket(lease, ns, queue.lease_seconds).to_json()
            dup = ACTION_TASKS["merge"].apply(kwargs={"action_id": action_id, "lease": ticket}).get()
            assert queue.holds(item.key), "the item must stay queued for the live attempt's end"
        assert dup["state"] != "failed", dup
        assert actions.get_outcome(settings, action_id)["state"] == "running"
        assert action_outputs(table) == written, "the duplicate removed the live attempt's output"
        out = holder.resume()
    assert "outcome" in out, out
    assert out["outcome"]["state"] == "succeeded"
    assert len(_commits(table, action_id)) == 1
    live = set(live_files(table))
    assert not live & before
    assert all(table.io.new_input(p).exists() for p in live), "a committed file was deleted"
    assert "action.duplicate_left_alone" in _events(settings, action_id)
    queue.clear()


def _terminate(settings, where: str, **params) -> int:
    """Terminate the backends ``where`` selects, from a connection of no pool of the service's."""
    admin = create_engine(settings.database_url, poolclass=NullPool)
    try:
        with admin.connect() as conn:
            killed = conn.execute(text(f"SELECT count(pg_terminate_backend(pid)) FROM {where}"), params).scalar()
            conn.commit()
    finally:
        admin.dispose()
    return int(killed or 0)


def test_the_holders_connections_dropping_lets_no_duplicate_in_and_it_commits_once(settings, spark, catalog):
    """PostgreSQL drops the holder's connections (as a restart does) while it works: its claim on the action
    must survive, a second delivery must not run, and the holder commits exactly once."""
    table, action_id = _action(settings, catalog)
    with PausedHolder(settings, action_id, spark) as holder:
        # every connection of the service in this database: a lock connection, the pool, the lease's
        killed = _terminate(settings, """pg_stat_activity WHERE datname = current_database()
            AND pid <> pg_backend_pid() AND (application_name LIKE 'autooptimize%' OR pid IN (
              SELECT pid FROM pg_locks WHERE locktype = 'advisory'
                AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(:k, 0)))""", k=action_id)
        assert killed >= 1
        with pytest.raises(Retry) as busy:
            actions.execute(settings, action_id, spark=spark)
        assert isinstance(busy.value, ActionBusy)
        assert action_outputs(table)
        out = holder.resume()
    assert out.get("outcome", {}).get("state") == "succeeded", out
    assert len(_commits(table, action_id)) == 1
    assert actions.get_outcome(settings, action_id)["state"] == "succeeded"


def test_a_holder_whose_lease_was_taken_over_commits_deletes_and_records_nothing(settings, spark, catalog):
    """The holder stalls past its lease; another process takes the action over and gives it up (removing
    its output, as the new holder may). When the stale holder wakes, its commit is refused."""
    table, action_id = _action(settings, catalog)
    before = set(live_files(table))
    snapshot = table.current_snapshot().snapshot_id
    with PausedHolder(settings, action_id, spark) as holder:
        with session_scope(settings) as s:  # the lease ran out while the holder stalled
            s.execute(text("UPDATE ao_action_leases SET expires_at = clock_timestamp() - interval '1 second' "
                           "WHERE action_id = :id"), {"id": action_id})
        taken = actions.fail_permanently(settings, action_id, "taken over in a test")
        assert taken["state"] == "failed"
        assert not action_outputs(table), "the new holder removes the uncommitted output"
        out = holder.resume()
    assert isinstance(out.get("error"), LeaseLost), out
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot, "the stale holder committed"
    assert set(live_files(table)) == before
    final = actions.get_outcome(settings, action_id)
    assert (final["state"], final["error"]) == ("failed", "taken over in a test")
    events = _events(settings, action_id)
    assert "action.lease_lost" in events and events.count("action.failed") == 1


def test_a_holder_that_lost_its_lease_or_lock_deletes_no_file(settings, catalog):
    """Every way the service deletes files under a table asks the thread's fence first: a directory of
    output, a batch of files (hygiene). Once the lease is another holder's, or the lock is gone, nothing
    goes."""
    table, action_id = _action(settings, catalog)
    location = table.location()
    directory = f"{location}/data/day=2026-01-01/ao-{action_id}"
    local = directory.removeprefix("file://")
    os.makedirs(f"{local}/g0", exist_ok=True)
    for name in ("g0/part-0.parquet", "stray.parquet"):
        with open(f"{local}/{name}", "wb") as f:
            f.write(b"not committed")
    claimed = claim(settings, action_id, "attempt", start=True)
    with HeldLease(settings, claimed.lease):
        with session_scope(settings) as s:  # the lease ran out and another attempt took it
            s.execute(text("UPDATE ao_action_leases SET expires_at = clock_timestamp() WHERE action_id = :id"),
                      {"id": action_id})
            assert isinstance(leases.acquire(s, action_id, leases.holder_identity("other"), 60), leases.Taken)
        with pytest.raises(LeaseLost):
            paths.delete_tree(location, directory, table.io)
        with pytest.raises(LeaseLost):
            delete_files(location, [f"{directory}/stray.parquet"], table.io)
    assert os.path.exists(f"{local}/g0/part-0.parquet") and os.path.exists(f"{local}/stray.parquet")

    lock = AdvisoryLock(settings, f"test.fence:{uuid.uuid4()}")
    assert lock.acquire()
    with fenced(lock):
        lock.release()  # as if PostgreSQL had dropped its session
        with pytest.raises(LeaseLost):
            paths.delete_tree(location, directory, table.io)
    assert os.path.exists(f"{local}/g0/part-0.parquet")
    paths.delete_tree(location, directory, table.io)  # no fence: the caller decides
    assert not os.path.exists(local)
