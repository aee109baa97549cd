"""Services hand their work to the Dispatch port they are given (here an in-memory recorder): no broker,
but real PostgreSQL and a real table (so it lives with the integration tests)."""

from __future__ import annotations

import contextlib
import threading

from sqlalchemy import select

from autooptimize.services import actions, tracking
from autooptimize.services.ports import ActionTicket
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, TrackedTable
from tasks.actions import _hand_on
from tasks.rpq import QueueItem, build_queue
from tasks.send import CeleryDispatch
from tests.fakes import RecordingDispatch
from tests.integration.tables import DAY1, DAY2, identifier, make_table


def test_submit_hands_the_ticket_to_the_port(settings, catalog):
    ident = identifier(make_table(catalog, {DAY1: 3, DAY2: 1}))
    port = RecordingDispatch()
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=port)
    outcome = actions.get_outcome(settings, action_id)
    assert port.checks == 1
    assert port.tickets == [ActionTicket(action_id=action_id, table=ident, partition=outcome["partition_key"],
                                         kind="merge", priority_class=outcome["priority_class"])]
    assert outcome["partition"] is not None and outcome["state"] == "queued"
    # a duplicate returns the queued action and sends nothing more
    assert actions.submit(settings, ident, partition="day=2026-01-01", dispatch=port) == action_id
    assert len(port.tickets) == 1


def test_submit_without_a_port_only_records(settings, catalog):
    ident = identifier(make_table(catalog, {DAY1: 2}))
    action_id = actions.submit(settings, ident, partition="day=2026-01-01")
    assert actions.get_outcome(settings, action_id)["state"] == "queued"


def test_two_submissions_racing_for_one_partition_make_one_action(settings, catalog, monkeypatch):
    """Both look for an active action before either inserts (a barrier holds each after its look): without
    the submission lock both found none and both inserted. With it the second look waits for the first
    insert to commit, finds it, and returns its id."""
    ident = identifier(make_table(catalog, {DAY1: 3}))
    tracking.track(settings, ident)
    looked = threading.Barrier(2)
    real = actions.active_action

    def look_then_wait(*args, **kwargs):
        found = real(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):
            looked.wait(timeout=2)  # the other submission looks too (unless it waits on the lock)
        return found

    monkeypatch.setattr(actions, "active_action", look_then_wait)
    ids: list[str] = []

    def one() -> None:
        ids.append(actions.submit(settings, ident, partition="day=2026-01-01"))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(ids) == 2 and ids[0] == ids[1]
    with session_scope(settings) as session:
        rows = session.scalars(select(Action).join(TrackedTable, TrackedTable.id == Action.table_id).where(
            TrackedTable.identifier == ident)).all()
        assert [r.id for r in rows] == [ids[0]]


def test_two_submissions_racing_to_track_a_table_both_get_its_row(settings, catalog, monkeypatch):
    """Both find the table untracked (a barrier holds each after its look); one tracks it, the other's insert
    meets the unique key and takes the row that won."""
    ident = identifier(make_table(catalog, {DAY1: 3}))
    looked = threading.Barrier(2)
    real = tracking.tracked_table

    def look_then_wait(*args, **kwargs):
        found = real(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):
            looked.wait(timeout=2)
        return found

    monkeypatch.setattr(tracking, "tracked_table", look_then_wait)
    ids: list[int] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            ids.append(tracking.ensure_tracked(settings, ident))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(ids) == 2 and ids[0] == ids[1]


def test_an_action_recorded_while_its_partitions_item_is_held_is_queued_when_that_one_ends(settings, catalog):
    """A ends in PostgreSQL while its queue item is still leased; decide then records B on the same partition.
    The queue keeps one item per partition and kind, so B's enqueue is refused. Once A's actor acks, it
    queues B: B does not wait for the sweeper."""
    ident = identifier(make_table(catalog, {DAY1: 3}))
    queue = build_queue(settings)
    queue.clear()
    first = actions.submit(settings, ident, partition="day=2026-01-01")
    outcome = actions.get_outcome(settings, first)
    item = QueueItem(first, ident, outcome["partition_key"], "merge", outcome["priority_class"])
    assert queue.enqueue(item)
    lease = queue.dequeue(item.priority_class, item.table)
    assert lease is not None and lease.item.action_id == first
    with session_scope(settings) as session:  # A has ended; its actor has not acked yet
        session.get(Action, first).state = "succeeded"
    second = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=CeleryDispatch(settings))
    assert second != first
    assert queue.dequeue(item.priority_class, item.table) is None, "the held item refused B"
    assert queue.ack(lease)
    assert not queue.holds(item.key)
    _hand_on(settings, lease.item, first)
    handed = queue.dequeue(item.priority_class, item.table)
    assert handed is not None and handed.item.action_id == second
    queue.clear()
