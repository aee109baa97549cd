"""Observe: rolling N and SSE from snapshots against real tables, PostgreSQL and the listener process."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pyiceberg.expressions import EqualTo, LessThan
from pyiceberg.io.pyarrow import schema_to_pyarrow
from sqlalchemy import func, select, text

from autooptimize.domain.entropy import squared_error
from autooptimize.iceberg.commit import commit_replace, data_file_from_footer
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.snapshots import HistoryGap, snapshot_diff, snapshots_since
from autooptimize.services import tracking
from autooptimize.services.observe.attention import (
    observed_state,
    partitions_needing_attention,
    sweep_attention,
)
from autooptimize.services.observe.changes import PollSchedule, changed_tables
from autooptimize.services.observe.roll import observe_table
from autooptimize.services.observe.scan import mark_for_scan, scan_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, EntropyHistory, PartitionStats
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.stats import partition_figures
from scheduler.listener import run_listener
from tests.integration.tables import DAY1, DAY2, batch, identifier, key_of, make_table

TARGET = 4000  # bytes: the small test files straddle it, so SSE mixes zero and non-zero errors
TOLERANCE = 1000
DAY3 = dt.date(2026, 1, 3)
DAYS = (DAY1, DAY2, DAY3)


K1, K2, K3 = key_of(DAY1), key_of(DAY2), key_of(DAY3)
REPO = Path(__file__).resolve().parents[2]
_ids = itertools.count(1_000_000)


def _track(settings, table, **tuning) -> int:
    tuning = {"target_file_size": TARGET, "tolerance": TOLERANCE, **tuning}
    return int(tracking.track(settings, identifier(table), **tuning)["id"])


def _exact(table, target: int = TARGET) -> dict[tuple[int, str], tuple[int, int, int, int]]:
    table.refresh()
    result = {}
    for key, pf in live_partitions(table).items():
        sizes = [f.size for f in pf.data_files]
        if sizes:
            result[key] = (len(sizes), sum(squared_error(s, target) for s in sizes), sum(sizes),
                           sum(1 for s in sizes if s < target))
    return result


def _stored(settings, table_id: int) -> dict[tuple[int, str], tuple[int, int, int, int]]:
    with session_scope(settings) as s:
        return {k: (f.n_files, f.sse, f.total_bytes, f.small_files) for k, f in partition_figures(s, table_id).items()}


def _cursor(settings, table_id: int) -> TableCursor | None:
    with session_scope(settings) as s:
        row = s.get(TableCursor, table_id)
        if row is not None:
            s.expunge(row)
        return row


def _history(settings, table_id: int, source: str | None = None) -> list[EntropyHistory]:
    with session_scope(settings) as s:
        stmt = select(EntropyHistory).where(EntropyHistory.table_id == table_id).order_by(EntropyHistory.id)
        if source is not None:
            stmt = stmt.where(EntropyHistory.source == source)
        rows = list(s.scalars(stmt))
        s.expunge_all()
        return rows


def _append(table, day: dt.date, rows: int) -> None:
    first = next(_ids)
    for _ in range(rows):
        next(_ids)
    table.append(batch(first, rows, day))


def _merge(table, day: dt.date) -> bool:
    """Rewrite every data file of a partition into one, committed as autooptimize's REPLACE."""
    table.refresh()
    pf = live_partitions(table).get((table.spec().spec_id, key_of(day)))
    if pf is None or len(pf.data_files) < 2:
        return False
    schema = schema_to_pyarrow(table.schema())
    data = pa.concat_tables([pq.read_table(f.path.removeprefix("file://")).cast(schema) for f in pf.data_files])
    path = f"{table.location()}/data/day={day.isoformat()}/merged-{uuid.uuid4()}.parquet"
    Path(path.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path.removeprefix("file://"))
    out = data_file_from_footer(table, path, pf.spec_id, pf.record)
    commit_replace(table, [f.data_file for f in pf.data_files], [out], {"test": "merge"})
    return True


def _expire_all_but_current(table) -> None:
    table.refresh()
    current = table.current_snapshot()
    old = [s.snapshot_id for s in table.metadata.snapshots if current is None or s.snapshot_id != current.snapshot_id]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()


def _rollback(table) -> bool:
    table.refresh()
    current = table.current_snapshot()
    if current is None or current.parent_snapshot_id is None:
        return False
    if table.metadata.snapshot_by_id(current.parent_snapshot_id) is None:
        return False
    table.manage_snapshots().rollback_to_snapshot(current.parent_snapshot_id).commit()
    return True


def _apply(table, op: tuple) -> None:
    with warnings.catch_warnings():
        # pyiceberg warns when a delete or overwrite matches nothing: a normal random step here
        warnings.filterwarnings("ignore", "Delete operation did not match any records", UserWarning)
        _apply_op(table, op)
    table.refresh()


def _apply_op(table, op: tuple) -> None:
    kind = op[0]
    if kind == "append":
        _append(table, DAYS[op[1]], op[2])
    elif kind == "append2":
        first = next(_ids)
        for _ in range(2 * op[1]):
            next(_ids)
        table.append(pa.concat_tables([batch(first, op[1], DAYS[op[2]]), batch(first + op[1], op[1], DAYS[op[3]])]))
    elif kind == "overwrite":
        first = next(_ids)
        for _ in range(op[2]):
            next(_ids)
        table.overwrite(batch(first, op[2], DAYS[op[1]]), overwrite_filter=EqualTo("day", DAYS[op[1]]))
    elif kind == "dynamic":
        first = next(_ids)
        for _ in range(op[2]):
            next(_ids)
        table.dynamic_partition_overwrite(batch(first, op[2], DAYS[op[1]]))
    elif kind == "delete_day":
        table.delete(EqualTo("day", DAYS[op[1]]))
    elif kind == "delete_some":
        # deletes rows below an id somewhere inside the table: whole files go, others are rewritten
        table.refresh()
        ids = [r["id"] for r in table.scan(selected_fields=("id",)).to_arrow().to_pylist()]
        if ids:
            ids.sort()
            table.delete(LessThan("id", ids[min(len(ids) - 1, int(len(ids) * op[1]))]))
    elif kind == "merge":
        _merge(table, DAYS[op[1]])
    elif kind == "expire":
        _expire_all_but_current(table)
    elif kind == "rollback":
        _rollback(table)
    else:  # pragma: no cover
        raise AssertionError(op)


_day = st.integers(0, 2)
_rows = st.integers(1, 600)
OPS = st.one_of(
    st.tuples(st.just("append"), _day, _rows),
    st.tuples(st.just("append"), _day, _rows),
    st.tuples(st.just("append2"), _rows, _day, _day),
    st.tuples(st.just("overwrite"), _day, _rows),
    st.tuples(st.just("dynamic"), _day, _rows),
    st.tuples(st.just("delete_day"), _day),
    st.tuples(st.just("delete_some"), st.floats(0.05, 0.6)),
    st.tuples(st.just("merge"), _day),
    st.tuples(st.just("merge"), _day),
    st.tuples(st.just("expire")),
    st.tuples(st.just("rollback")),
)
# A step is a few operations, then one observation: expirations inside a step remove snapshots the
# listener has not seen yet, which must end in a scan and never in a wrong figure.
STEPS = st.lists(st.lists(OPS, min_size=1, max_size=3), min_size=1, max_size=6)


@hsettings(max_examples=15, deadline=None, database=None, derandomize=False,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_rolling_stats_equal_a_full_recomputation_after_every_step(settings, catalog, steps):
    table = make_table(catalog, {DAY1: 2, DAY2: 1}, rows=40, name="roll")
    table_id = _track(settings, table)
    first = observe_table(settings, identifier(table))
    assert first.scanned and first.scan_reason == "first_sight"
    assert _stored(settings, table_id) == _exact(table)
    for ops in steps:
        before = table.current_snapshot().snapshot_id if table.current_snapshot() else None
        for op in ops:
            _apply(table, op)
        report = observe_table(settings, identifier(table))
        # exact integers: N, SSE, bytes and small files of every partition
        assert _stored(settings, table_id) == _exact(table), (ops, report)
        current = table.current_snapshot()
        cursor = _cursor(settings, table_id)
        assert cursor is not None and cursor.last_snapshot_id == (current.snapshot_id if current else None)
        assert cursor.metadata_location == table.metadata_location
        # a scan only where the history truly cannot be followed, never to paper over a wrong diff
        assert report.scan_reason in (None, "not_an_ancestor", "expired_before_seen", "no_current_snapshot"), report
        if not any(op[0] in ("expire", "rollback") for op in ops):
            assert not report.scanned, (ops, report)
        if not report.scanned:
            assert current is None or before == current.snapshot_id or report.snapshots_applied > 0
    # a snapshot is in the history at most once per partition (the unique index, checked here too)
    rows = _history(settings, table_id, "snapshot")
    assert len({(r.spec_id, r.partition_key, r.snapshot_id) for r in rows}) == len(rows)


def test_first_sight_scans_then_each_snapshot_reads_only_its_own_manifests(settings, catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 2}, name="own")
    table_id = _track(settings, table)
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.snapshot_id == table.current_snapshot().snapshot_id
    assert _stored(settings, table_id) == _exact(table)
    assert {r.source for r in _history(settings, table_id)} == {"scan"}

    _append(table, DAY1, 10)
    _append(table, DAY3, 10)
    report = observe_table(settings, identifier(table))
    assert not report.scanned
    assert (report.snapshots_applied, report.manifests_read, report.files_added) == (2, 2, 2)
    assert _stored(settings, table_id) == _exact(table)
    assert _merge(table, DAY1)
    report = observe_table(settings, identifier(table))
    assert (report.snapshots_applied, report.files_added, report.files_removed) == (1, 1, 4)
    assert _stored(settings, table_id) == _exact(table)
    history = _history(settings, table_id, "snapshot")
    assert [(h.partition_key, h.n_files) for h in history] == [
        (K1, 4), (K3, 1), (K1, 1)]

    # nothing new: nothing read, nothing recorded
    report = observe_table(settings, identifier(table))
    assert (report.snapshots_applied, report.scanned, report.manifests_read) == (0, False, 0)
    assert len(_history(settings, table_id)) == len(history) + 2


def test_snapshot_diff_ignores_carried_over_entries_and_delete_manifests_of_older_snapshots(catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 1}, name="diff")
    table.delete(EqualTo("day", DAY2))  # a DELETE snapshot with a manifest of DELETED entries
    _append(table, DAY1, 5)  # the next snapshot carries manifests from before
    table.refresh()
    chain = snapshots_since(table.metadata, None)
    diffs = [snapshot_diff(table, s) for s in chain]
    assert [(d.added_files, d.removed_files) for d in diffs] == [(1, 0)] * 4 + [(0, 1), (1, 0)]
    assert all(d.manifests_read == 1 for d in diffs)
    # the overwrite below rewrites the manifest that held DAY1's files: carried-over entries are EXISTING
    table.overwrite(batch(next(_ids), 5, DAY1), overwrite_filter=EqualTo("id", 0))
    table.refresh()
    last = snapshots_since(table.metadata, chain[-1].snapshot_id)
    assert sum(snapshot_diff(table, s).removed_files for s in last) == 1


def test_history_gaps_are_detected(catalog):
    table = make_table(catalog, {DAY1: 2}, name="gap")
    seen = table.current_snapshot().snapshot_id
    _append(table, DAY1, 5)
    _append(table, DAY1, 5)
    assert len(snapshots_since(table.metadata, seen)) == 2
    _expire_all_but_current(table)
    with pytest.raises(HistoryGap):
        snapshots_since(table.metadata, seen)
    assert snapshots_since(table.metadata, table.current_snapshot().snapshot_id) == []


def test_snapshots_expired_before_being_seen_trigger_a_scan(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, name="exp")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    _append(table, DAY1, 5)
    _append(table, DAY2, 5)
    _expire_all_but_current(table)
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.scan_reason == "not_an_ancestor"
    assert _stored(settings, table_id) == _exact(table)
    # already-seen snapshots may expire freely: no scan, only the location moves
    _append(table, DAY2, 5)
    observe_table(settings, identifier(table))
    _expire_all_but_current(table)
    report = observe_table(settings, identifier(table))
    assert not report.scanned and report.snapshots_applied == 0
    assert _cursor(settings, table_id).metadata_location == table.metadata_location


def test_rollback_and_retuned_target_trigger_a_scan(settings, catalog):
    table = make_table(catalog, {DAY1: 3}, name="rb")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    assert _rollback(table)
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.scan_reason == "not_an_ancestor"
    assert _stored(settings, table_id) == _exact(table)

    _track(settings, table, target_file_size=2500, tolerance=100)
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.scan_reason == "target_changed"
    assert _stored(settings, table_id) == _exact(table, 2500)


def test_drift_is_corrected_by_a_scan_and_a_replay_cannot_count_twice(settings, catalog):
    table = make_table(catalog, {DAY1: 3, DAY2: 2}, name="drift")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    exact = _exact(table)
    with session_scope(settings) as s:  # corrupt one partition behind the listener's back
        s.execute(text("UPDATE ao_partition_stats SET n_files = n_files + 7, sse = sse + 5 "
                       "WHERE table_id = :t AND partition_key = :k"), {"t": table_id, "k": K2})
    report = scan_table(settings, identifier(table), K2)
    assert report.scanned and report.partitions_changed == 1
    assert _stored(settings, table_id) == exact
    scans = _history(settings, table_id, "scan")
    assert scans[-1].partition_key == K2

    # roll the cursor back one snapshot, as a buggy or concurrent writer might: the replay is refused
    # by the history's unique index, the table is scanned, and nothing is counted twice
    _append(table, DAY1, 5)
    observe_table(settings, identifier(table))
    table.refresh()
    with session_scope(settings) as s:
        s.execute(text("UPDATE ao_table_cursors SET last_snapshot_id = :p, metadata_location = 'x' "
                       "WHERE table_id = :t"), {"p": table.current_snapshot().parent_snapshot_id, "t": table_id})
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.scan_reason == "drift"
    assert _stored(settings, table_id) == _exact(table)
    rows = _history(settings, table_id, "snapshot")
    assert len([r for r in rows if r.snapshot_id == table.current_snapshot().snapshot_id]) == 1

    # an operator's request for a scan is honoured by the next observation
    mark_for_scan(settings, identifier(table), "operator")
    report = observe_table(settings, identifier(table))
    assert report.scanned and report.scan_reason == "operator"


def test_changed_tables_finds_exactly_the_tables_with_new_metadata(settings, catalog):
    a = make_table(catalog, {DAY1: 1}, name="chg")
    b = make_table(catalog, {DAY1: 1}, name="chg")
    _track(settings, a)
    _track(settings, b)
    assert {identifier(a), identifier(b)} <= set(changed_tables(settings))  # never seen
    observe_table(settings, identifier(a))
    observe_table(settings, identifier(b))
    changed = set(changed_tables(settings))
    assert identifier(a) not in changed and identifier(b) not in changed
    _append(a, DAY2, 3)
    changed = set(changed_tables(settings))
    assert identifier(a) in changed and identifier(b) not in changed
    # polling (catalogs without a table list): bounded per table and per call
    clock = [100.0]
    poll = PollSchedule(min_interval=10, max_per_call=1_000, clock=lambda: clock[0])
    first = changed_tables(settings, poll=poll, force_polling=True)
    assert {identifier(a), identifier(b)} <= set(first)
    assert changed_tables(settings, poll=poll, force_polling=True) == []
    clock[0] += 10
    assert set(changed_tables(settings, poll=poll, force_polling=True)) == set(first)
    small = PollSchedule(min_interval=0, max_per_call=1, clock=lambda: clock[0])
    assert len(changed_tables(settings, poll=small, force_polling=True)) == 1


def test_partitions_over_threshold_are_enqueued_once_and_the_rest_counted(settings, catalog):
    table = make_table(catalog, {DAY1: 4, DAY2: 2}, rows=20, name="att")
    # DAY1: four tiny files, DAY2 two: each beyond the best layout its bytes allow (one tiny file alone
    # would be healthy: the health rule); DAY3 gets one file above the target: error 0
    table_id = _track(settings, table)
    calls: list[tuple[int, int, str]] = []
    report = observe_table(settings, identifier(table), on_attention=lambda *a: calls.append(a))
    assert report.scanned
    assert sorted(calls) == [(table_id, 0, K1), (table_id, 0, K2)]
    assert (report.enqueued, report.skipped_below_threshold) == (2, 0)

    _append(table, DAY3, 3000)
    calls.clear()
    report = observe_table(settings, identifier(table), on_attention=lambda *a: calls.append(a))
    assert calls == [] and report.skipped_below_threshold == 1

    with session_scope(settings) as s:  # a merge already queued on DAY1: not enqueued again
        s.add(Action(id=str(uuid.uuid4()), table_id=table_id, spec_id=0, partition_key=K1,
                     kind="merge", trigger="event", priority_class="normal", state=ActionState.QUEUED.value,
                     options={}, attempts=0, timings={}))
    _append(table, DAY1, 5)
    report = observe_table(settings, identifier(table), on_attention=lambda *a: calls.append(a))
    assert calls == [] and report.skipped_pending == 1
    needing = {(a.partition_key, a.pending) for a in partitions_needing_attention(settings, identifier(table))}
    assert needing == {(K1, True), (K2, False)}
    cursor = _cursor(settings, table_id)
    assert (cursor.attention_enqueued, cursor.skipped_below_threshold, cursor.skipped_pending) == (2, 1, 1)
    swept: list[tuple[int, int, str]] = []
    counts = sweep_attention(settings, lambda *a: swept.append(a), identifier(table))
    assert swept == [(table_id, 0, K2)] and counts == {"enqueued": 1, "pending": 1, "failed": 0}


def test_listener_thread_keeps_stats_current(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, name="thr")
    table_id = _track(settings, table)
    stop = threading.Event()
    seen: list[tuple[int, int, str]] = []
    thread = threading.Thread(target=run_listener, args=(settings, stop, 0.05, lambda *a: seen.append(a)),
                              daemon=True)
    thread.start()
    try:
        for i in range(5):
            _append(table, DAYS[i % 3], 10)
        _wait_for_cursor(settings, table, table_id, 30)
        assert _stored(settings, table_id) == _exact(table)
        assert any(t == table_id for t, _, _ in seen)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def _wait_for_cursor(settings, table, table_id: int, timeout: float) -> None:
    table.refresh()
    want = table.current_snapshot().snapshot_id
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cursor = _cursor(settings, table_id)
        if cursor is not None and cursor.last_snapshot_id == want and cursor.metadata_location == table.metadata_location:
            return
        time.sleep(0.05)
    raise AssertionError(f"the listener did not reach snapshot {want} within {timeout} s")


def _start_listener(log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "scheduler.listener", "--interval", "0.02"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_killing_the_listener_mid_stream_neither_misses_nor_double_counts(settings, catalog, tmp_path):
    table = make_table(catalog, {DAY1: 1}, name="kill")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    baseline = table.current_snapshot().snapshot_id
    writer_table = catalog.load_table(identifier(table))
    writer_error: list[BaseException] = []
    stop_writing = threading.Event()
    written = [0]

    def write() -> None:  # commits keep flowing while listeners are killed and restarted
        try:
            while not stop_writing.is_set():
                _append(writer_table, DAYS[written[0] % 3], 5 + written[0] % 50)
                written[0] += 1
                time.sleep(0.04)
        except BaseException as exc:  # reported by the test thread
            writer_error.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    log_path = tmp_path / "listener.log"
    applied_by_incarnation = []
    proc = _start_listener(log_path)
    writer.start()
    try:
        for kill in range(4):
            # wait until this incarnation is at work (it moved the cursor), then kill it mid-stream
            before = _cursor(settings, table_id).snapshots_applied
            deadline = time.monotonic() + 30
            while _cursor(settings, table_id).snapshots_applied == before:
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.01)
            assert writer.is_alive(), writer_error
            time.sleep(0.05 * kill)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            applied_by_incarnation.append(_cursor(settings, table_id).snapshots_applied - before)
            proc = _start_listener(log_path)
        stop_writing.set()
        writer.join(60)
        assert not writer_error, writer_error
        _wait_for_cursor(settings, table, table_id, 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log_path.read_text()[-3000:]
    finally:
        stop_writing.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    commits = written[0]
    assert all(n > 0 for n in applied_by_incarnation), applied_by_incarnation
    table.refresh()
    chain = [s.snapshot_id for s in snapshots_since(table.metadata, baseline)]
    assert len(chain) == commits
    rows = _history(settings, table_id)
    # every snapshot exactly once (each appended one file to one partition), in commit order, no scan
    assert [r.snapshot_id for r in rows if r.source == "snapshot"] == chain, log_path.read_text()[-3000:]
    assert [r.snapshot_id for r in rows if r.source == "scan"] == [baseline]
    assert _stored(settings, table_id) == _exact(table)
    assert _cursor(settings, table_id).snapshots_applied == commits


class Crash(BaseException):
    """Stands for the process dying at a chosen point (not an Exception: nothing may catch it)."""


def test_a_crash_inside_a_snapshot_transaction_applies_nothing_of_it(settings, catalog, monkeypatch):
    import autooptimize.services.observe.roll as observe

    table = make_table(catalog, {DAY1: 2}, name="crash")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    for day in (DAY1, DAY2, DAY3):
        _append(table, day, 9)
    real = observe.advance_cursor
    calls = []

    def crash_on_second(*args, **kwargs):
        calls.append(kwargs["snapshot_id"])
        if len(calls) == 2:  # the second snapshot's deltas and history are written, the cursor not yet
            raise Crash()
        return real(*args, **kwargs)

    monkeypatch.setattr(observe, "advance_cursor", crash_on_second)
    with pytest.raises(Crash):
        observe_table(settings, identifier(table))
    monkeypatch.setattr(observe, "advance_cursor", real)
    table.refresh()
    chain = snapshots_since(table.metadata, None)
    assert _cursor(settings, table_id).last_snapshot_id == chain[-3].snapshot_id
    assert [r.snapshot_id for r in _history(settings, table_id, "snapshot")] == [chain[-3].snapshot_id]
    report = observe_table(settings, identifier(table))
    assert (report.scanned, report.snapshots_applied) == (False, 2)
    assert [r.snapshot_id for r in _history(settings, table_id, "snapshot")] == [s.snapshot_id for s in chain[-3:]]
    assert _stored(settings, table_id) == _exact(table)


def test_status_counters_and_history_agree_with_stats(settings, catalog):
    table = make_table(catalog, {DAY1: 2, DAY2: 2}, name="agree")
    table_id = _track(settings, table)
    observe_table(settings, identifier(table))
    for i in range(4):
        _append(table, DAYS[i % 3], 7)
    observe_table(settings, identifier(table))
    with session_scope(settings) as s:
        latest = {}
        for h in s.scalars(select(EntropyHistory).where(EntropyHistory.table_id == table_id)
                           .order_by(EntropyHistory.id)):
            latest[(h.spec_id, h.partition_key)] = (h.n_files, int(h.sse))
        stored = {(p.spec_id, p.partition_key): (p.n_files, int(p.sse)) for p in
                  s.scalars(select(PartitionStats).where(PartitionStats.table_id == table_id))}
        total = s.execute(select(func.sum(PartitionStats.n_files)).where(PartitionStats.table_id == table_id)).scalar()
    assert {k: v for k, v in latest.items() if v[0]} == stored
    assert total == int(table.current_snapshot().summary["total-data-files"])
    state = observed_state(settings, identifier(table))
    assert state["observed"] and state["snapshot_id"] == table.current_snapshot().snapshot_id
    assert (state["snapshots_applied"], state["scans"], state["files"]) == (4, 1, total)
    assert {(p["spec_id"], p["partition_key"]): (p["n"], p["sse"]) for p in state["partitions"]} == stored
    assert [p["mse"] for p in state["partitions"]] == sorted((p["mse"] for p in state["partitions"]), reverse=True)

    # a backlog longer than max_chain is cheaper to scan than to follow
    for _ in range(3):
        _append(table, DAY1, 3)
    report = observe_table(settings, identifier(table), max_chain=2)
    assert report.scanned and report.scan_reason == "long_backlog"
    assert _stored(settings, table_id) == _exact(table)


def test_listener_once_from_the_command_line(settings, catalog):
    from scheduler.listener import main

    table = make_table(catalog, {DAY2: 2}, name="once")
    table_id = _track(settings, table)
    assert main(["--once"]) == 0
    _append(table, DAY3, 4)
    assert main(["--once"]) == 0
    assert _cursor(settings, table_id).last_snapshot_id == table.current_snapshot().snapshot_id
    assert _stored(settings, table_id) == _exact(table)


def test_the_overview_reads_observed_tables_from_the_listeners_stats(settings, catalog):
    from autooptimize.services import tracking
    from autooptimize.services.observe.roll import observe_table
    from autooptimize.services.observe.scan import mark_for_scan
    from autooptimize.services.status import all_status, table_status
    from tests.integration.tables import DAY1, DAY2, identifier, make_table

    table = make_table(catalog, {DAY1: 4, DAY2: 2})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")

    def line():
        return next(x for x in all_status(settings) if x["table"] == ident)

    assert line()["source"] == "snapshot"  # not observed yet: computed from the snapshot
    observe_table(settings, ident)
    observed = line()
    exact = table_status(settings, ident)
    assert observed["source"] == "listener"
    assert observed["snapshot_id"] == exact["snapshot_id"]
    assert (observed["files"], observed["partitions"], observed["worst_partition"], observed["worst_mse"]) == (
        exact["files"], len(exact["partitions"]), exact["partitions"][0]["partition"], exact["partitions"][0]["mse"])
    mark_for_scan(settings, ident, "test")
    assert line()["source"] == "snapshot"  # stats not trusted until the rescan
