"""Issue 26's control plane, against real PostgreSQL and Redis: the listener finds changed tables without
comparing every table each pass, hands whole scans and decisions to control-queue tasks, and a decide task
is sent once per table while one is queued, carrying every partition asked for."""

from __future__ import annotations

import json

import redis
from sqlalchemy import text

from autooptimize.services import tracking
from autooptimize.services.observe.changes import CatalogWatch, ScanHandOff, changed_tables, tables_to_scan
from autooptimize.services.observe.roll import observe_table
from autooptimize.storage.db import session_scope
from tasks.routing import CONTROL_QUEUE
from tasks.send import DECIDE_KEY, request_decide, take_decide_requests
from tests.integration.tables import DAY1, DAY2, batch, identifier, make_table


def _queued(settings, task: str) -> list[dict]:
    client = redis.Redis.from_url(settings.redis_url)
    found = []
    for key in client.keys(f"{CONTROL_QUEUE}*"):
        if client.type(key) != b"list":
            continue
        for raw in client.lrange(key, 0, -1):
            message = json.loads(raw)
            if message["headers"]["task"] == task:
                found.append(message)
    return found


def test_the_watch_compares_every_table_now_and_then_and_only_moved_rows_in_between(settings, catalog):
    a, b = make_table(catalog, {DAY1: 1}, name="watch"), make_table(catalog, {DAY1: 1}, name="watch")
    for t in (a, b):
        tracking.track(settings, identifier(t))
        observe_table(settings, identifier(t))
    clock = [0.0]
    watch = CatalogWatch(full_every=10, clock=lambda: clock[0])
    assert not {identifier(a), identifier(b)} & set(changed_tables(settings, watch=watch))  # the full look
    a.append(batch(1000, 5, DAY2))
    clock[0] = 1
    moved = changed_tables(settings, watch=watch)  # only rows written since the last look
    assert identifier(a) in moved and identifier(b) not in moved
    observe_table(settings, identifier(a))
    clock[0] = 2
    assert identifier(a) not in changed_tables(settings, watch=watch)
    # a scan flag is no catalog write: the next full look finds it
    with session_scope(settings) as session:
        session.execute(text("UPDATE ao_table_cursors SET needs_scan = true FROM ao_tracked_tables t "
                             "WHERE t.id = ao_table_cursors.table_id AND t.identifier = :i"), {"i": identifier(b)})
    clock[0] = 3
    changed_tables(settings, watch=watch)  # (finds it only if another open transaction holds the window wide)
    clock[0] = 11
    assert identifier(b) in changed_tables(settings, watch=watch)
    observe_table(settings, identifier(b))
    watch.look_again()
    assert identifier(b) not in changed_tables(settings, watch=watch)


def test_tables_needing_a_whole_scan_are_handed_over_in_batches_once(settings, catalog):
    tables = [make_table(catalog, {DAY1: 1}, name="handoff") for _ in range(3)]
    names = [identifier(t) for t in tables]
    for name in names:
        tracking.track(settings, name)
    observe_table(settings, names[0])
    assert {names[1], names[2]} <= tables_to_scan(settings) and names[0] not in tables_to_scan(settings)
    sent: list[list[str]] = []
    clock = [0.0]
    handoff = ScanHandOff(sent.append, batch=1, resend_after=60, clock=lambda: clock[0])
    assert handoff.split(settings, names) == [names[0]]  # the observed one stays with the listener
    assert sorted(sent) == sorted([[names[1]], [names[2]]])
    assert handoff.split(settings, names) == [names[0]] and len(sent) == 2  # not sent again ...
    clock[0] = 61
    handoff.split(settings, names)
    assert len(sent) == 4  # ... until the task may have been lost

    def broken(_: list[str]) -> None:
        raise ConnectionError("broker away")

    assert ScanHandOff(broken).split(settings, names) == names  # then the listener scans them itself


def test_one_decide_task_per_table_carries_every_partition_asked_for(settings):
    client = redis.Redis.from_url(settings.redis_url)
    table_id = 987_654
    client.delete(DECIDE_KEY.format(catalog=settings.catalog, table_id=table_id))
    before = len(_queued(settings, "autooptimize.decide"))
    assert request_decide(settings, table_id, 0, '{"day": 1}') is True
    assert request_decide(settings, table_id, 0, '{"day": 2}') is False  # one is queued: no second task
    assert request_decide(settings, table_id, 0, '{"day": 1}') is False
    queued = _queued(settings, "autooptimize.decide")
    assert len(queued) == before + 1
    assert take_decide_requests(settings, table_id) == [(0, '{"day": 1}'), (0, '{"day": 2}')]
    assert take_decide_requests(settings, table_id) == []
    # the task has taken its partitions: the next hand-over sends a new task
    assert request_decide(settings, table_id, 0, '{"day": 3}') is True
    assert take_decide_requests(settings, table_id) == [(0, '{"day": 3}')]


def test_the_auto_tracker_lists_the_catalog_only_when_its_table_list_moved(settings, catalog, monkeypatch):
    import scheduler.listener as listener_module
    from scheduler.listener import AutoTracker

    variant = settings.model_copy(update={"auto_track": "test.fingerprint_*", "auto_track_seconds": 1.0})
    listings = []
    real = listener_module.auto_track
    monkeypatch.setattr(listener_module, "auto_track", lambda s: listings.append(1) or real(s))
    tracker = AutoTracker(variant)
    first = identifier(make_table(catalog, {DAY1: 1}, rows=5, name="fingerprint"))
    assert first in tracker.run_due(now=100.0)
    assert tracker.run_due(now=102.0) == [] and len(listings) == 1  # nothing created: not listed again
    second = identifier(make_table(catalog, {DAY1: 1}, rows=5, name="fingerprint"))
    assert tracker.run_due(now=104.0) == [second] and len(listings) == 2
    assert tracker.run_due(now=104.0 + AutoTracker.FULL_LISTING_SECONDS) == [] and len(listings) == 3  # now and then
