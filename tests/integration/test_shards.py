"""Sharded listeners (real PostgreSQL, Redis, listener processes and Iceberg tables on disk): shards split
and move under leases, a listener that lost a shard writes no cursor of it, a ``kill -9`` hands its
shards over within the lease while a writer commits and nothing is missed, and ``notify`` wakes the
listener of a table long before its poll would.

Each test uses a catalog of its own (pyiceberg's SqlCatalog in the test database under another name), so
its listeners see its tables only.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.domain.entropy import squared_error
from autooptimize.domain.shards import shard_of
from autooptimize.errors import InvalidArgument, LeaseLost, TableNotFound
from autooptimize.iceberg.catalog import get_catalog, load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.services import tracking
from autooptimize.services.notify import notify
from autooptimize.services.observe.changes import changed_tables
from autooptimize.services.observe.roll import observe_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.repositories import tracked_table
from autooptimize.storage.shard_leases import fenced_cursor_writes, holders
from autooptimize.storage.stats import partition_figures
from scheduler.shards import ShardOwnership
from tests.integration.tables import DAY1, DAY2, SCHEMA, SPEC, batch
from tests.integration.web import console_process

REPO = Path(__file__).resolve().parents[2]
LEASE = 4.0
TARGET = 1 << 20


@pytest.fixture
def own_catalog(settings, monkeypatch):
    """Settings for a catalog of this test's own (SQL, same database, its own name and namespace)."""
    name = f"sh{uuid.uuid4().hex[:8]}"
    env = {f"PYICEBERG_CATALOG__{name.upper()}__TYPE": "sql",
           f"PYICEBERG_CATALOG__{name.upper()}__URI": settings.database_url,
           f"PYICEBERG_CATALOG__{name.upper()}__WAREHOUSE": settings.warehouse_dir.as_uri()}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    own = settings.model_copy(update={"catalog": name, "listener_lease_seconds": LEASE})
    get_catalog(own).create_namespace("s")
    return own


def _tables(settings: Settings, count: int) -> list[str]:
    catalog = get_catalog(settings)
    names = []
    for i in range(count):
        name = f"s.t{i:03d}"
        catalog.create_table(name, schema=SCHEMA, partition_spec=SPEC).append(batch(0, 10, DAY1))
        tracking.track(settings, name, target_file_size=TARGET)
        observe_table(settings, name)
        names.append(name)
    return names


def _listener(settings: Settings, log: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    environ = {**os.environ, "AO_CATALOG": settings.catalog, "AO_LISTENER_LEASE_SECONDS": str(LEASE),
               "PYTHONPATH": str(REPO), **env}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "scheduler.listener", *args], cwd=REPO, env=environ,
                                stdout=out, stderr=subprocess.STDOUT)


def _held_by_pid(settings: Settings) -> dict[int, set[int]]:
    with session_scope(settings) as session:
        shards = holders(session, settings.catalog, settings.listener_shards)
    by_pid: dict[int, set[int]] = {}
    for shard, holder in shards.items():
        pid = json.loads(holder)["pid"] if holder else 0
        by_pid.setdefault(pid, set()).add(shard)
    return by_pid


def _wait(predicate, timeout: float, what: str, step: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(step)


def _cursor(settings: Settings, name: str) -> int | None:
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, name)
        cursor = session.get(TableCursor, row.id)
        return cursor.last_snapshot_id if cursor else None


def _differs(settings: Settings, name: str) -> str | None:
    """Why the table's rolling stats differ from a full recomputation, or None when they are equal."""
    table = load_table(settings, name)
    exact = {}
    for key, pf in live_partitions(table).items():
        sizes = [f.size for f in pf.data_files]
        exact[key] = (len(sizes), sum(squared_error(s, TARGET) for s in sizes))
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, name)
        stored = {k: (f.n_files, f.sse) for k, f in partition_figures(session, row.id).items()}
    if stored != exact:
        return f"{name}: stored {stored} vs exact {exact}"
    snapshot = table.current_snapshot()
    if _cursor(settings, name) != snapshot.snapshot_id:
        return f"{name}: cursor {_cursor(settings, name)} is not at the current snapshot {snapshot.snapshot_id}"
    return None


def test_listeners_split_the_shards_and_a_stopped_one_hands_over_at_once(own_catalog):
    first, second = ShardOwnership(own_catalog), ShardOwnership(own_catalog)
    try:
        first.start()
        assert len(first.held()) == own_catalog.listener_shards and first.leads()
        second.start()
        _wait(lambda: len(first.held()) == len(second.held()) == own_catalog.listener_shards // 2, 15, "a split")
        assert not set(first.held()) & set(second.held())
        assert first.leads() and not second.leads()  # shard 0 moves last
        started = time.monotonic()
        first.stop()  # releases: the other takes over on its next check, not after the lease
        _wait(lambda: len(second.held()) == own_catalog.listener_shards, 10, "the hand-over")
        assert time.monotonic() - started < LEASE / 2 and second.leads()
    finally:
        first.stop()
        second.stop()


def test_a_listener_that_lost_a_shard_writes_no_cursor_of_it(own_catalog):
    (name,) = _tables(own_catalog, 1)
    old, new = ShardOwnership(own_catalog), ShardOwnership(own_catalog)
    try:
        old.start()
        shard, token = old.lease_of(name)
        get_catalog(own_catalog).load_table(name).append(batch(100, 10, DAY2))
        before = _cursor(own_catalog, name)
        # the old holder stalls past its term: its lease runs out and the other listener takes the shard
        old._stop.set()
        old._thread.join(10)
        with session_scope(own_catalog) as session:
            session.execute(text("UPDATE ao_listener_shards SET expires_at = clock_timestamp() "
                                 "WHERE catalog = :c AND shard = :s"), {"c": own_catalog.catalog, "s": shard})
        new.start()
        assert new.lease_of(name) is not None and new.lease_of(name)[1] > token
        with pytest.raises(LeaseLost, match=f"shard {shard}"), fenced_cursor_writes(old.fence(shard, token)):
            observe_table(own_catalog, name)
        assert _cursor(own_catalog, name) == before  # nothing written under the lost lease
        with fenced_cursor_writes(new.fence(*new.lease_of(name))):
            assert observe_table(own_catalog, name).snapshots_applied == 1
        assert _differs(own_catalog, name) is None
    finally:
        old.stop()
        new.stop()


def test_notify_wakes_the_listener_long_before_its_poll(own_catalog, tmp_path):
    (name,) = _tables(own_catalog, 1)
    with pytest.raises(TableNotFound, match="s.nowhere"):
        notify(own_catalog, "s.nowhere")
    with pytest.raises(InvalidArgument, match="snapshot id 'x1'"):
        notify(own_catalog, name, "x1")
    # polling as for a catalog without a table list, every 30 s at most, and passes 30 s apart when idle
    listener = _listener(own_catalog, tmp_path / "listener.log", "--interval", "30", AO_FORCE_POLLING="true")
    try:
        _wait(lambda: set(_held_by_pid(own_catalog)) == {listener.pid}, 30, "the listener to take every shard")
        time.sleep(3)  # its first pass (one table) is over
        table = get_catalog(own_catalog).load_table(name)
        table.append(batch(200, 10, DAY2))
        snapshot = table.current_snapshot().snapshot_id
        time.sleep(3)
        assert _cursor(own_catalog, name) != snapshot, "polling saw the commit: the test proves nothing"
        from scheduler.wake import publish

        sent = time.monotonic()
        result = notify(own_catalog, name, snapshot, wake=lambda n, s: publish(own_catalog, n, s))
        assert result["woken"] and result["snapshot_id"] == snapshot
        _wait(lambda: _cursor(own_catalog, name) == snapshot, 20, "the notified snapshot")
        woke_in = time.monotonic() - sent
        assert woke_in < 5, f"observed {woke_in:.1f} s after notify, no faster than polling"

        def notices() -> int:
            with session_scope(own_catalog) as session:
                return int(session.execute(text(
                    "SELECT count(*) FROM ao_listener_notices n JOIN ao_tracked_tables t ON t.id = n.table_id "
                    "WHERE t.catalog = :c"), {"c": own_catalog.catalog}).scalar())

        _wait(lambda: notices() == 0, 10, "the notice to be consumed")  # cleared once the observation ended
        assert _differs(own_catalog, name) is None
    finally:
        listener.terminate()
        listener.wait(30)


def test_a_notice_whose_wake_up_was_lost_is_found_on_the_next_pass(own_catalog, tmp_path):
    (name,) = _tables(own_catalog, 1)
    # passes every second, but each table polled at most every 30 s: only the notice can be quick
    listener = _listener(own_catalog, tmp_path / "listener.log", "--interval", "1", AO_FORCE_POLLING="true")
    try:
        _wait(lambda: set(_held_by_pid(own_catalog)) == {listener.pid}, 30, "the listener to take every shard")
        time.sleep(3)  # its first poll of the table is over
        table = get_catalog(own_catalog).load_table(name)
        table.append(batch(300, 10, DAY2))
        snapshot = table.current_snapshot().snapshot_id
        time.sleep(3)
        assert _cursor(own_catalog, name) != snapshot, "polling saw the commit: the test proves nothing"
        sent = time.monotonic()
        assert notify(own_catalog, name, snapshot)["woken"] is False  # no wake-up sent: Redis "dropped" it
        _wait(lambda: _cursor(own_catalog, name) == snapshot, 30, "the notified snapshot")
        assert time.monotonic() - sent < 10, "the notice waited for the poll"
    finally:
        listener.terminate()
        listener.wait(30)


def test_kill_9_moves_the_shards_within_the_lease_and_nothing_is_missed(own_catalog, tmp_path):
    names = _tables(own_catalog, 50)
    listeners = [_listener(own_catalog, tmp_path / f"listener{i}.log", "--interval", "0.1") for i in range(2)]
    stop = threading.Event()
    commits: list[tuple[str, int, float]] = []

    def write() -> None:
        rng = random.Random(7)
        catalog = get_catalog(own_catalog)
        tables = {n: catalog.load_table(n) for n in names}
        next_id = 1000
        while not stop.is_set():
            name = rng.choice(names)
            tables[name].append(batch(next_id, 10, rng.choice([DAY1, DAY2])))
            commits.append((name, tables[name].current_snapshot().snapshot_id, time.monotonic()))
            next_id += 10

    writer = threading.Thread(target=write, daemon=True)
    try:
        half = own_catalog.listener_shards // 2
        _wait(lambda: sorted(len(s) for p, s in _held_by_pid(own_catalog).items()) == [half, half], 60,
              "two listeners holding half the shards each")
        writer.start()
        time.sleep(3)
        victim, survivor = listeners
        lost = _held_by_pid(own_catalog)[victim.pid]
        killed = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        _wait(lambda: _held_by_pid(own_catalog).get(survivor.pid, set()) >= lost, 3 * LEASE, "the hand-over")
        moved = time.monotonic() - killed
        # the bound is the lease; a quarter more for a machine whose CPUs the writer and PostgreSQL share
        assert moved <= LEASE * 1.25, f"shards moved {moved:.1f} s after the kill, lease {LEASE} s"
        moved_tables = {n for n in names if shard_of(n, own_catalog.listener_shards) in lost}
        # the writer goes on committing, to the moved tables too, before and after the hand-over
        _wait(lambda: sum(1 for n, _, at in commits if n in moved_tables and at > killed + moved) >= 5, 60,
              "commits to the moved tables after the hand-over", step=0.2)
        assert any(n in moved_tables and killed < at < killed + moved for n, _, at in commits)
    finally:
        stop.set()
        writer.join(30)
    try:
        _wait(lambda: not changed_tables(own_catalog), 120, "the survivor to catch up", step=0.2)
        with session_scope(own_catalog) as session:
            recorded = {(r.identifier, r.snapshot_id) for r in session.execute(text(
                "SELECT t.identifier, h.snapshot_id FROM ao_entropy_history h JOIN ao_tracked_tables t "
                "ON t.id = h.table_id WHERE t.catalog = :c AND h.source = 'snapshot'"), {"c": own_catalog.catalog})}
        missed = [(n, s) for n, s, _ in commits if (n, s) not in recorded]
        assert missed == [], f"{len(missed)} commits never rolled into the stats, e.g. {missed[:3]}"
        assert [d for d in (_differs(own_catalog, n) for n in names) if d] == []
    finally:
        for proc in listeners:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)


def _post(url: str, body: object, auth: tuple[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.startswith(b"{") else {}


def test_post_api_notify_is_authenticated_and_validated(own_catalog, monkeypatch):
    (name,) = _tables(own_catalog, 1)
    monkeypatch.setenv("AO_CATALOG", own_catalog.catalog)
    with console_process() as (base, auth):
        url = f"{base}/api/notify"
        assert _post(url, {"table": name})[0] == 401
        status, body = _post(url, {"table": "s.missing"}, auth)
        assert status == 404 and "s.missing" in body["detail"]
        status, body = _post(url, {"table": name, "snapshot_id": "abc"}, auth)
        assert status == 400 and "snapshot id 'abc'" in body["detail"]
        assert _post(url, {"tabel": name}, auth)[0] == 422
        status, body = _post(url, {"table": name, "snapshot_id": 42}, auth)
        assert status == 200 and (body["table"], body["snapshot_id"], body["woken"]) == (name, 42, True)
    with session_scope(own_catalog) as session:
        row = tracked_table(session, own_catalog.catalog, name)
        assert session.execute(text("SELECT snapshot_id FROM ao_listener_notices WHERE table_id = :t"),
                               {"t": row.id}).scalar() == 42


def test_the_notify_command(own_catalog, monkeypatch):
    (name,) = _tables(own_catalog, 1)
    monkeypatch.setenv("AO_CATALOG", own_catalog.catalog)

    def run(*args: str) -> tuple[int, dict]:
        done = subprocess.run([sys.executable, "-m", "autooptimize.cli", "notify", *args, "--json"], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=120)
        return done.returncode, json.loads(done.stdout.decode().strip().splitlines()[-1])

    code, body = run(name, "123")
    assert code == 0 and (body["table"], body["snapshot_id"], body["woken"]) == (name, 123, True)
    code, body = run("s.untracked")
    assert code == 2 and "s.untracked" in body["error"]["message"] and "track it first" in body["error"]["message"]
    code, body = run(name, "12x")
    assert code == 2 and "snapshot id '12x'" in body["error"]["message"]
    with session_scope(own_catalog) as session:  # the refused ones changed nothing
        row = tracked_table(session, own_catalog.catalog, name)
        assert session.execute(text("SELECT snapshot_id FROM ao_listener_notices WHERE table_id = :t"),
                               {"t": row.id}).scalar() == 123
