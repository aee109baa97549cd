"""The one commit loop (autooptimize.iceberg.commits) against real tables and a writer committing
beside it: a REPLACE stages its manifests once and wins without rewriting anything."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import ManifestContent

from autooptimize.errors import ConflictAbort
from autooptimize.iceberg.commit import commit_replace, data_file_from_footer
from autooptimize.iceberg.commits import CommitPolicy, CommitStats, StagedAppend, apply_with_retry
from tests.integration.tables import DAY1, DAY2, batch, make_table

pytestmark = pytest.mark.usefixtures("settings")


def _live(table):
    table.refresh()
    snapshot = table.current_snapshot()
    out = {}
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            out[str(entry.data_file.file_path)] = entry.data_file
    return out


def _merged_output(table, inputs):
    """Read the inputs with pyarrow and write them as one Parquet file with the table's field ids."""
    target = schema_to_pyarrow(table.schema())
    data = pa.concat_tables([pq.read_table(f.file_path.removeprefix("file://")).cast(target) for f in inputs])
    path = f"{table.location()}/data/merged-{uuid.uuid4().hex}.parquet"
    pq.write_table(data, path.removeprefix("file://"))
    first = inputs[0]
    return data_file_from_footer(table, path, first.spec_id, first.partition), data.num_rows


def _rows(table):
    table.refresh()
    return table.scan().to_arrow().num_rows


def _day1(table):
    days = (DAY1 - dt.date(1970, 1, 1)).days  # Iceberg keeps a date partition as days since the epoch
    return [f for f in _live(table).values() if f.partition[0] == days]


def test_policy_reads_table_properties_and_jitters():
    policy = CommitPolicy.of({"commit.retry.num-retries": "3", "commit.retry.min-wait-ms": "5",
                              "commit.retry.max-wait-ms": "40", "commit.retry.total-timeout-ms": "2000"})
    assert (policy.attempts, policy.min_wait, policy.max_wait, policy.total_seconds) == (4, 0.005, 0.04, 2.0)
    waits = {round(policy.wait(5), 6) for _ in range(50)}
    assert len(waits) > 10 and all(0.005 <= w <= 0.04 for w in waits)
    assert CommitPolicy.of({"commit.retry.num-retries": "nonsense"}).attempts == CommitPolicy().attempts


def test_replace_wins_against_a_writer_committing_to_the_same_partition(catalog):
    table = make_table(catalog, {DAY1: 6, DAY2: 2}, rows=20, name="race")
    stop = threading.Event()
    written: list[int] = []

    def writer():
        writer_table = catalog.load_table(table.name())
        next_id = 10_000
        while not stop.is_set():
            writer_table.append(batch(next_id, 5, DAY1))
            written.append(next_id)
            next_id += 5

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    committed = []
    try:
        deadline = time.monotonic() + 120
        while len(committed) < 3 and time.monotonic() < deadline:
            while len(written) < 2 * (len(committed) + 1):
                time.sleep(0.05)  # let the writer get ahead so the head moves under the commit
            table.refresh()
            inputs = _day1(table)
            output, rows = _merged_output(table, inputs)
            stats = CommitStats()
            snapshot = commit_replace(table, inputs, [output], {"autooptimize.action-id": f"t{len(committed)}"},
                                      stats=stats)
            committed.append((snapshot, stats, len(inputs)))
            assert stats.manifests_rewritten_on_retry == 0
    finally:
        stop.set()
        thread.join(timeout=30)
    assert len(committed) == 3, "three replaces must commit while the writer commits"
    assert any(stats.conflicts > 0 for _, stats, _ in committed) or len(written) < 3
    rows_expected = 6 * 20 + 2 * 20 + 5 * len(written)
    assert _rows(table) == rows_expected
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)) == rows_expected
    summaries = [s.summary for s in table.metadata.snapshots if s.summary and s.summary.get("autooptimize.action-id")]
    assert [s.operation.value for s in summaries] == ["replace"] * 3


def test_replace_of_a_file_removed_meanwhile_aborts_and_removes_its_manifests(catalog):
    table = make_table(catalog, {DAY1: 3}, rows=10, name="gone")
    inputs = _day1(table)
    output, _ = _merged_output(table, inputs)
    meta_dir = table.location().removeprefix("file://") + "/metadata"
    import os

    # another process removes one input first
    other = catalog.load_table(table.name())
    with other.transaction() as tx:
        tx.delete("id < 5")
    after_other = set(os.listdir(meta_dir))
    with pytest.raises(ConflictAbort, match="no longer live"):
        commit_replace(table, inputs, [output], {"autooptimize.action-id": "gone"})
    assert set(os.listdir(meta_dir)) == after_other, "an aborted commit leaves no manifest behind"
    table.refresh()
    assert not any((s.summary or {}).get("autooptimize.action-id") == "gone" for s in table.metadata.snapshots)


def test_append_with_a_check_is_refused_when_the_check_fails(catalog):
    table = make_table(catalog, {DAY1: 1}, rows=10, name="check")
    data = batch(500, 10, DAY2)
    path = f"{table.location()}/data/extra-{uuid.uuid4().hex}.parquet"
    pq.write_table(data.cast(schema_to_pyarrow(table.schema())), path.removeprefix("file://"))
    from pyiceberg.typedef import Record

    added = data_file_from_footer(table, path, table.spec().spec_id, Record((DAY2 - dt.date(1970, 1, 1)).days))

    def refuse(_head):
        raise ConflictAbort("batch already committed")

    with pytest.raises(ConflictAbort):
        apply_with_retry(table, StagedAppend(table, [added], check=refuse), {})
    snapshot = apply_with_retry(table, StagedAppend(table, [added]), {"k": "v"})
    assert snapshot.summary.operation.value == "append" and snapshot.summary["k"] == "v"
    assert _rows(table) == 20


def _entries(table):
    """(path, snapshot id, data sequence number) of every live data file, from the current manifests."""
    table.refresh()
    out = set()
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content == ManifestContent.DATA:
            for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                out.add((str(e.data_file.file_path), e.snapshot_id, e.sequence_number))
    return out


def test_manifest_rewrite_is_staged_once_and_keeps_a_concurrent_append(catalog):
    from autooptimize.iceberg.manifests import StagedManifestRewrite, data_manifests

    table = make_table(catalog, {DAY1: 4, DAY2: 3}, rows=10, name="mrace")
    before = _entries(table)
    staged = StagedManifestRewrite(table, target_size=1)
    written = staged.written()
    assert written and staged.report.before.count == 7
    other = catalog.load_table(table.name())
    other.append(batch(90_000, 5, DAY2))  # the head moves under the rewrite
    appended = _entries(other) - before
    stats = CommitStats()
    snapshot = apply_with_retry(table, staged, {"autooptimize.action-id": "m1"}, stats=stats)
    assert stats.conflicts == 1 and stats.manifests_rewritten_on_retry == 0
    assert staged.written() == written, "a lost race writes no manifest again"
    assert snapshot.summary.operation.value == "replace"
    assert _entries(table) == before | appended, "every file kept with its snapshot id and sequence number"
    listed = {m.manifest_path for m in data_manifests(table)}
    assert set(written) <= listed and len(listed) == len(written) + 1  # ours, plus the append's own
    assert _rows(table) == 7 * 10 + 5


def test_manifest_rewrite_stages_again_when_a_merge_rewrote_its_manifests(catalog):
    from autooptimize.iceberg.manifests import StagedManifestRewrite

    table = make_table(catalog, {DAY1: 4}, rows=10, name="mremerge")
    staged = StagedManifestRewrite(table, target_size=1)
    first = staged.written()
    other = catalog.load_table(table.name())
    inputs = _day1(other)
    output, _ = _merged_output(other, inputs)
    commit_replace(other, inputs, [output], {"autooptimize.action-id": "merge"})
    after_merge = _entries(other)
    stats = CommitStats()
    apply_with_retry(table, staged, {"autooptimize.action-id": "m2"}, stats=stats)
    assert stats.conflicts == 1 and stats.manifests_rewritten_on_retry >= 1
    assert not set(staged.written()) & set(first), "the superseded staging's manifests are not kept"
    assert _entries(table) == after_merge and _rows(table) == 40
    import os

    meta = table.location().removeprefix("file://") + "/metadata"
    names = set(os.listdir(meta))
    assert not any(p.rsplit("/", 1)[-1] in names for p in first), "the first staging's manifests are removed"
    assert all(p.rsplit("/", 1)[-1] in names for p in staged.written())
