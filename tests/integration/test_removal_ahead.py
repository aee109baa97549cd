"""The inputs' DELETED manifests written ahead of a commit, while the action's Spark job runs
(autooptimize/iceberg/staging.StagedRemoval, services/rewrite/ahead.py), on real tables: taken by a commit
of exactly those files, written again only when the head's manifests moved, and removed whenever no
commit took them."""

from __future__ import annotations

import os

import pytest

from autooptimize.errors import ConflictAbort
from autooptimize.iceberg.commit import commit_replace
from autooptimize.iceberg.commits import CommitStats
from autooptimize.iceberg.staging import StagedRemoval
from autooptimize.services.rewrite.ahead import RemovalAhead
from tests.integration.tables import DAY1, DAY2, batch, make_table
from tests.integration.test_commits import _day1, _entries, _merged_output, _rows

pytestmark = pytest.mark.usefixtures("settings")

OWNER = "0b9d5c1e-7f3a-4c2e-9d1b-5e6f7a8b9c0d"  # the action the manifests are written for


def _metadata_files(table):
    return set(os.listdir(table.location().removeprefix("file://") + "/metadata"))


def _name(path):
    return path.rsplit("/", 1)[-1]


def test_a_commit_of_the_same_files_takes_the_manifests_written_ahead_across_a_concurrent_append(catalog):
    table = make_table(catalog, {DAY1: 5, DAY2: 2}, rows=10, name="ahead_taken")
    inputs = _day1(table)
    before = {p for p, _, _ in _entries(table)}
    ahead = StagedRemoval(table, inputs, OWNER)
    assert ahead.written() and not ahead.taken
    assert all(_name(p).startswith(f"ao-{OWNER}-") for p in ahead.written()), "named for the action"
    other = catalog.load_table(table.name())
    other.append(batch(50_000, 5, DAY1))  # a writer commits to the same partition meanwhile
    appended = {p for p, _, _ in _entries(other)} - before
    assert len(appended) == 1
    output, rows = _merged_output(table, inputs)
    table.refresh()
    stats = CommitStats()
    snapshot = commit_replace(table, inputs, [output], {"autooptimize.action-id": "a1"}, stats=stats, ahead=ahead)
    assert ahead.taken and snapshot.snapshot_id == ahead.snapshot_id
    assert stats.manifests_rewritten_on_retry == 0, "the head still lists the manifests they replace"
    names = _metadata_files(table)
    assert all(_name(p) in names for p in ahead.written())
    assert {p for p, _, _ in _entries(table)} == (before - {str(f.file_path) for f in inputs}) | appended | {
        str(output.file_path)}
    assert _rows(table) == rows + 2 * 10 + 5


def test_manifests_written_ahead_are_written_again_when_someone_rewrote_the_head_s_manifests(catalog):
    from autooptimize.iceberg.commits import apply_with_retry
    from autooptimize.iceberg.manifests import StagedManifestRewrite

    table = make_table(catalog, {DAY1: 4, DAY2: 2}, rows=10, name="ahead_moved")
    inputs = _day1(table)
    ahead = StagedRemoval(table, inputs, OWNER)
    first = ahead.written()
    other = catalog.load_table(table.name())
    apply_with_retry(other, StagedManifestRewrite(other, target_size=1), {"autooptimize.action-id": "tidy"})
    output, _ = _merged_output(table, inputs)
    table.refresh()
    stats = CommitStats()
    commit_replace(table, inputs, [output], {"autooptimize.action-id": "a2"}, stats=stats, ahead=ahead)
    assert ahead.taken and stats.manifests_rewritten_on_retry >= 1
    names = _metadata_files(table)
    assert not any(_name(p) in names for p in first), "the superseded manifests written ahead are removed"
    assert _rows(table) == 6 * 10
    assert {p for p, _, _ in _entries(table)} >= {str(output.file_path)}
    assert not ({str(f.file_path) for f in inputs} & {p for p, _, _ in _entries(table)})


def test_a_commit_of_other_files_leaves_them_and_the_action_removes_them(catalog):
    table = make_table(catalog, {DAY1: 4}, rows=10, name="ahead_other")
    inputs = _day1(table)
    before = _metadata_files(table)
    ahead = RemovalAhead(table, inputs, OWNER)
    removal = ahead.take()
    assert removal is not None and removal.written()
    assert all(_name(p) in _metadata_files(table) for p in removal.written())
    output, _ = _merged_output(table, inputs[:3])  # the commit removes fewer files than were planned
    snapshot = commit_replace(table, inputs[:3], [output], {"autooptimize.action-id": "a3"}, ahead=removal)
    assert not removal.taken and snapshot.snapshot_id != removal.snapshot_id
    ahead.discard()
    left = _metadata_files(table) - before
    assert not any(_name(p) in left for p in removal.written()), "what no commit took is removed"
    assert _rows(table) == 40


def test_an_action_that_never_commits_removes_what_it_wrote_ahead(catalog):
    table = make_table(catalog, {DAY1: 3}, rows=10, name="ahead_failed")
    before = _metadata_files(table)
    ahead = RemovalAhead(table, _day1(table), OWNER)
    ahead.discard()  # the job failed: no commit took it
    assert _metadata_files(table) == before


def test_an_input_gone_before_the_manifests_are_written_ahead_writes_nothing(catalog):
    table = make_table(catalog, {DAY1: 3}, rows=10, name="ahead_gone")
    inputs = _day1(table)
    other = catalog.load_table(table.name())
    with other.transaction() as tx:
        tx.delete("id < 5")
    table.refresh()
    before = _metadata_files(table)
    with pytest.raises(ConflictAbort, match="no longer live"):
        StagedRemoval(table, inputs, OWNER)
    ahead = RemovalAhead(table, inputs, OWNER)
    assert ahead.take() is None, "the commit then writes its own and meets the same conflict"
    ahead.discard()
    assert _metadata_files(table) == before


def test_a_manifest_written_ahead_that_is_gone_is_not_taken_and_the_commit_writes_its_own(catalog):
    """Whatever removed it (an orphan removal run by another tool), a commit never names a missing file."""
    table = make_table(catalog, {DAY1: 4}, rows=10, name="ahead_deleted")
    inputs = _day1(table)
    ahead = StagedRemoval(table, inputs, OWNER)
    for path in ahead.written():
        os.remove(path.removeprefix("file://"))
    output, _ = _merged_output(table, inputs)
    snapshot = commit_replace(table, inputs, [output], {"autooptimize.action-id": "a4"}, ahead=ahead)
    assert not ahead.taken and snapshot.snapshot_id != ahead.snapshot_id
    assert _rows(table) == 40
    assert {p for p, _, _ in _entries(table)} == {str(output.file_path)}
