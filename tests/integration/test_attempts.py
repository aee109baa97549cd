"""Attempts (issue 13): the action timeout is enforced, crash loops end after AO_MAX_ATTEMPTS, and the
sweeper finds actions left queued or running with no live lease. Real PostgreSQL, Redis, Spark Connect
server, Iceberg tables and killed worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from sqlalchemy import text

from autooptimize.domain import fencing
from autooptimize.domain.actions import Hooks
from autooptimize.errors import AttemptTimedOut, Retry
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from autooptimize.services.attempt import HeldLease
from autooptimize.services.execution import claim
from autooptimize.services.sweeper import sweep_actions
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit_events
from scheduler.beat import beat_schedule
from scheduler.dispatcher import sweep_into
from tasks.rpq import QueueItem, build_queue
from tasks.send import CeleryDispatch
from tests.fakes import RecordingDispatch
from tests.integration.tables import DAY1, action_outputs, identifier, live_files, make_table

ROOT = Path(__file__).resolve().parents[2]

# a worker process that dies (kill -9) right before its commit: a task that kills its worker
DIES = r"""
import os, sys
from autooptimize.config import get_settings
from autooptimize.domain.actions import Hooks
from autooptimize.services import actions

actions.execute(get_settings(), sys.argv[1], hooks=Hooks(before_commit=lambda: os.kill(os.getpid(), 9)))
print("finished without being killed")
"""

# one delivery of the action's Celery task, as a worker runs it
DELIVERY = r"""
import json, sys
from tasks.actions import ACTION_TASKS

print(json.dumps(ACTION_TASKS["merge"].apply(kwargs={"action_id": sys.argv[1]}).get()))
"""


def _python(code: str, action_id: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, action_id], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


def _commits(table, action_id: str) -> list[int]:
    table.refresh()
    return [s.snapshot_id for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _events(settings, action_id: str) -> list:
    with session_scope(settings) as s:
        rows = audit_events(s, action_id)
        s.expunge_all()
        return rows


def _action(settings, catalog, files: int = 4, rows: int = 50):
    table = make_table(catalog, {DAY1: files}, rows=rows)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return table, actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)


# --- the action timeout ----------------------------------------------------------------------------

@pytest.mark.spark
def test_an_attempt_past_the_action_timeout_stops_removes_its_output_and_is_retried(settings, spark, catalog):
    # the session's first Spark action starts the executors' Python workers and compiles the digest kernels
    # (seconds): warm them, so that the 2 s timeout below falls in the before_commit pause, as meant
    _, warm_up = _action(settings, catalog)
    assert actions.execute(settings, warm_up, spark=spark)["state"] == "succeeded"
    table, action_id = _action(settings, catalog)
    before = set(live_files(table))
    snapshot = table.current_snapshot().snapshot_id
    short = settings.model_copy(update={"action_timeout_seconds": 2})

    with pytest.raises(Retry, match="ran past AO_ACTION_TIMEOUT_SECONDS"):
        actions.execute(short, action_id, spark=spark, hooks=Hooks(before_commit=lambda: time.sleep(4)))

    assert table.refresh().current_snapshot().snapshot_id == snapshot, "a timed-out attempt committed"
    assert not action_outputs(table), "its uncommitted output must be removed"
    out = actions.get_outcome(settings, action_id)
    assert out["state"] == "queued" and "ran past" in out["error"]
    assert [e.event for e in _events(settings, action_id)][-2:] == ["action.timed_out", "action.retry"]

    again = actions.execute(settings, action_id, spark=spark)
    assert (again["state"], again["attempts"]) == ("succeeded", 2)
    assert not set(live_files(table)) & before and len(_commits(table, action_id)) == 1


def test_a_stopped_attempt_interrupts_its_work_refuses_commits_and_may_still_clean_up(settings, catalog):
    """The heartbeat stops an attempt at its deadline (the stop callbacks interrupt its Spark jobs, and
    again while it runs on); past it, a commit is refused and a deletion, as the holder, allowed."""
    _, action_id = _action(settings, catalog)
    claimed = claim(settings, action_id, "attempt", start=True)
    calls: list[float] = []
    with HeldLease(settings, claimed.lease, timeout=0.5) as held:
        held.on_stop(lambda: calls.append(time.monotonic()))
        fencing.before_commit("commit in time")
        fencing.before_delete("remove output in time")
        time.sleep(2.0)
        assert held.stopped == "timed_out"
        assert len(calls) >= 2, "stop callbacks run at the deadline and again while the attempt goes on"
        with pytest.raises(AttemptTimedOut):
            fencing.before_commit("commit too late")
        fencing.before_delete("clean up after the deadline")
    fencing.before_commit("no fence outside the attempt")
    with session_scope(settings) as s:
        assert s.execute(text("SELECT released_at IS NOT NULL FROM ao_action_leases WHERE action_id = :id"),
                         {"id": action_id}).scalar()


# --- the cap on attempts ---------------------------------------------------------------------------

@pytest.mark.spark
def test_a_task_that_kills_its_worker_fails_after_max_attempts_and_its_message_is_dropped(settings, spark, catalog):
    table, action_id = _action(settings, catalog, files=6, rows=5_000)
    before = set(live_files(table))
    snapshot = table.current_snapshot().snapshot_id
    env = {"AO_MAX_ATTEMPTS": "2"}
    for attempt in (1, 2):  # Celery redelivers the message each time (late ack, reject on worker lost)
        died = _python(DIES, action_id, **env)
        assert died.returncode == -9, died.stderr[-2000:]
        assert actions.get_outcome(settings, action_id)["attempts"] == attempt
    assert action_outputs(table), "the dead attempts left output behind"

    third = _python(DELIVERY, action_id, **env)
    assert third.returncode == 0, third.stderr[-3000:]
    summary = json.loads(third.stdout.strip().splitlines()[-1])
    assert summary["state"] == "failed"  # the task returned: its message is acked, never redelivered

    out = actions.get_outcome(settings, action_id)
    assert (out["state"], out["reason"], out["attempts"]) == ("failed", "attempts_exhausted", 2)
    assert "attempt 2 ended without an outcome" in out["error"]
    assert table.refresh().current_snapshot().snapshot_id == snapshot and not _commits(table, action_id)
    assert set(live_files(table)) == before
    assert not action_outputs(table), "giving up removes the dead attempts' output"
    events = [e.event for e in _events(settings, action_id)]
    assert events.count("action.started") == 2 and events.count("action.attempt_lost") == 2


def test_max_attempts_is_validated():
    from autooptimize.config import load_settings
    from autooptimize.errors import ConfigError

    for bad in ("0", "-1", "many"):
        os.environ["AO_MAX_ATTEMPTS"] = bad
        try:
            with pytest.raises(ConfigError, match="AO_MAX_ATTEMPTS"):
                load_settings()
        finally:
            del os.environ["AO_MAX_ATTEMPTS"]
    assert load_settings().max_attempts == 5


# --- the sweeper -----------------------------------------------------------------------------------

@pytest.fixture
def isolated(settings):
    """The sweeper looks at every action of the catalog: close those other tests left pending."""
    with session_scope(settings) as session:
        session.execute(text("UPDATE ao_actions SET state = 'failed', reason = 'test_isolation' "
                             "WHERE state IN ('queued', 'running')"))


def _waiting(client: redis.Redis) -> dict[bytes, int]:
    """Messages waiting on each actor queue of the broker (Celery keeps one list per priority step)."""
    return {key: client.llen(key) for key in client.scan_iter(match="ao.actor.*") if client.type(key) == b"list"}


def _swept(settings, action_id: str) -> list[dict]:
    return [e.detail for e in _events(settings, action_id) if e.event == "action.swept"]


def _untracked_action(settings, catalog) -> tuple[str, str]:
    """A queued action (its table small, never executed in these tests)."""
    table = make_table(catalog, {DAY1: 2})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    return ident, actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)


def test_the_sweeper_requeues_a_lost_message_and_an_attempt_that_stopped_renewing(settings, catalog, isolated):
    now = settings.model_copy(update={"sweep_after_seconds": 0})
    ident, lost = _untracked_action(settings, catalog)  # its message never reached the broker
    _, stalled = _untracked_action(settings, catalog)
    claimed = claim(settings, stalled, "attempt", start=True)  # an attempt that then stopped renewing
    _, alive = _untracked_action(settings, catalog)
    held = HeldLease(settings, claim(settings, alive, "attempt", start=True).lease)
    with held:
        fresh = sweep_actions(settings, RecordingDispatch().action)  # AO_SWEEP_AFTER_SECONDS not yet passed
        assert not {lost, stalled, alive} & set(fresh.requeued + fresh.failed)
        with session_scope(settings) as s:
            s.execute(text("UPDATE ao_action_leases SET expires_at = clock_timestamp() WHERE action_id = :id"),
                      {"id": stalled})
        sent = RecordingDispatch()
        report = sweep_actions(now, sent.action)
        assert alive not in report.requeued + report.failed, "an action with a live lease is left alone"
        assert actions.get_outcome(settings, alive)["state"] == "running"
    assert {lost, stalled} <= set(report.requeued)
    assert {t.action_id for t in sent.tickets} >= {lost, stalled}
    ticket = next(t for t in sent.tickets if t.action_id == lost)
    assert (ticket.table, ticket.kind) == (ident, "merge")
    out = actions.get_outcome(settings, stalled)
    assert out["state"] == "queued" and "ended without an outcome" in out["error"]
    assert (_swept(settings, stalled)[-1]["decision"], _swept(settings, stalled)[-1]["state"]) == ("requeued", "running")
    assert (_swept(settings, lost)[-1]["decision"], _swept(settings, lost)[-1]["state"]) == ("requeued", "queued")
    assert claimed.lease.token < _token(settings, stalled), "the sweeper took the lease to decide"

    # sent through Celery it is a real message on its actor queue; swept again only once idle again
    celery = settings.model_copy(update={"sweep_after_seconds": 0, "dispatch": "direct"})
    client = redis.Redis.from_url(settings.redis_url)
    waiting = _waiting(client)
    report = sweep_actions(celery, CeleryDispatch(celery).action)
    grown = {k for k, n in _waiting(client).items() if n > waiting.get(k, 0)}
    assert lost in report.requeued and grown
    later = settings.model_copy(update={"sweep_after_seconds": 3600})
    assert lost not in sweep_actions(later, CeleryDispatch(later).action).requeued
    client.delete(*grown)  # no worker of a later test should run these


def _token(settings, action_id: str) -> int:
    with session_scope(settings) as s:
        return int(s.execute(text("SELECT token FROM ao_action_leases WHERE action_id = :id"), {"id": action_id}).scalar())


def test_the_sweeper_in_rpq_mode_enqueues_and_leaves_waiting_items_alone(settings, catalog, isolated):
    variant = settings.model_copy(update={"sweep_after_seconds": 0, "dispatch": "rpq"})
    ident, action_id = _untracked_action(settings, catalog)
    queue = build_queue(variant, f"test:sweep:{uuid.uuid4().hex[:8]}")
    try:
        first = sweep_into(variant, queue)
        assert action_id in first["requeued"]
        item = QueueItem(action_id, ident, actions.get_outcome(settings, action_id)["partition_key"], "merge",
                         actions.get_outcome(settings, action_id)["priority_class"])
        assert queue.holds(item.key)
        again = sweep_into(variant, queue)
        assert action_id in again["skipped"] and action_id not in again["requeued"]
        assert [d["decision"] for d in _swept(settings, action_id)] == ["requeued"]
    finally:
        queue.clear()


@pytest.mark.spark
def test_the_sweeper_fails_an_action_out_of_attempts_and_removes_its_output(settings, spark, catalog, isolated):
    table, action_id = _action(settings, catalog, files=6, rows=5_000)
    before = set(live_files(table))
    died = _python(DIES, action_id, AO_ACTION_LEASE_SECONDS="5")
    assert died.returncode == -9, died.stderr[-2000:]
    assert action_outputs(table)
    out_of_attempts = settings.model_copy(update={"sweep_after_seconds": 0, "max_attempts": 1})
    sent = RecordingDispatch()
    deadline = time.monotonic() + 30
    while action_id not in sweep_actions(out_of_attempts, sent.action).failed:
        assert time.monotonic() < deadline, "the dead attempt's lease never ran out"
        time.sleep(1)
    assert sent.tickets == []
    out = actions.get_outcome(settings, action_id)
    assert (out["state"], out["reason"]) == ("failed", "attempts_exhausted")
    assert "attempt 1 ended without an outcome" in out["error"]
    assert not action_outputs(table) and set(live_files(table)) == before
    assert _swept(settings, action_id)[-1]["decision"] == "failed"


def test_beat_runs_the_sweeper():
    from autooptimize.config import get_settings

    entry = beat_schedule(get_settings())["action-sweep"]
    assert entry["task"] == "autooptimize.sweep_actions" and entry["schedule"] <= 300
    from tasks.app import app

    app.loader.import_default_modules()  # what a worker does at start: the app's include list
    assert "autooptimize.sweep_actions" in app.tasks
