"""A commit whose answer is lost is never a failure: the catalog says CommitStateUnknown (or the request
times out) and applies the swap anyway, later. The action keeps its output, and the next attempt settles
the outcome from the table's history: it records success when the late swap landed, and re-commits its
verified output (the catalog then takes exactly one of the two) when it has not."""

from __future__ import annotations

import os

import pytest
import requests
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

from autooptimize.errors import Retry
from autooptimize.iceberg.checksum import table_checksum
from autooptimize.iceberg.commit import ACTION_ID_PROPERTY
from autooptimize.services import actions, tracking
from autooptimize.services.execution import fail_permanently
from tests.integration.tables import DAY1, DAY2, identifier, live_files, make_table, second_reader_checksum

pytestmark = pytest.mark.spark

LOST_ANSWERS = {
    "commit_state_unknown": lambda: CommitStateUnknownException("504 Gateway Timeout from the catalog's proxy"),
    "read_timeout": lambda: requests.exceptions.ReadTimeout("HTTPConnectionPool(host='rest', port=8181): Read timed out."),
}


class LateCatalog:
    """Wraps the real catalog's ``commit_table``: the first commit that carries ``action_id`` raises
    ``error`` without being applied; the test applies it later (:meth:`apply_late`), as a catalog behind
    a slow proxy does after the client gave up on the answer."""

    def __init__(self, catalog, action_id, error):
        self.real = catalog.commit_table
        self.action_id, self.error = action_id, error
        self.pending = None

    def commit_table(self, table, requirements, updates):
        summary = next((u.snapshot.summary for u in updates if hasattr(u, "snapshot")), None)
        if self.pending is None and summary is not None and summary.get(ACTION_ID_PROPERTY) == self.action_id:
            self.pending = (table, requirements, updates)
            raise self.error()
        return self.real(table, requirements, updates)

    def apply_late(self):
        return self.real(*self.pending)


def _commits_of(table, action_id):
    table.refresh()
    return [s for s in table.metadata.snapshots if s.summary and s.summary.get(ACTION_ID_PROPERTY) == action_id]


def _setup(settings, catalog, monkeypatch, error):
    table = make_table(catalog, {DAY1: 6, DAY2: 2})
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
    late = LateCatalog(catalog, action_id, error)
    monkeypatch.setattr(catalog, "commit_table", late.commit_table)
    return table, action_id, late


def _scan_rows(table):
    table.refresh()
    return table.scan().to_arrow().num_rows


@pytest.mark.parametrize("answer", sorted(LOST_ANSWERS))
def test_a_commit_applied_after_its_answer_was_lost_keeps_its_files(settings, spark, catalog, monkeypatch, answer):
    table, action_id, late = _setup(settings, catalog, monkeypatch, LOST_ANSWERS[answer])
    before, second = table_checksum(table), second_reader_checksum(table)

    with pytest.raises(Retry, match="commit outcome unknown"):
        actions.execute(settings, action_id, spark=spark)
    assert late.pending is not None, "the commit was never sent"
    assert actions.get_outcome(settings, action_id)["state"] == "queued"

    late.apply_late()  # the catalog's swap lands after the client gave up on the answer
    assert len(_commits_of(table, action_id)) == 1
    missing = [p for p in live_files(table) if not os.path.exists(p.removeprefix("file://"))]
    assert not missing, f"the late commit references files the attempt deleted: {missing}"
    assert _scan_rows(table) == 400

    out = actions.execute(settings, action_id, spark=spark)
    assert out["state"] == "succeeded" and out["reason"] == "already_committed", out
    assert len(_commits_of(table, action_id)) == 1
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second


@pytest.mark.parametrize("answer", sorted(LOST_ANSWERS))
def test_a_commit_that_never_lands_is_committed_once_by_the_retry(settings, spark, catalog, monkeypatch, answer):
    table, action_id, late = _setup(settings, catalog, monkeypatch, LOST_ANSWERS[answer])
    before, second = table_checksum(table), second_reader_checksum(table)

    with pytest.raises(Retry, match="commit outcome unknown"):
        actions.execute(settings, action_id, spark=spark)
    checkpoint = actions.get_outcome(settings, action_id).get("checkpoint") or {}
    out = actions.execute(settings, action_id, spark=spark)
    assert out["state"] == "succeeded", out
    assert len(_commits_of(table, action_id)) == 1
    # the lost request can never land now: the catalog swaps only on the head it was sent on
    with pytest.raises(CommitFailedException):
        late.apply_late()
    assert len(_commits_of(table, action_id)) == 1
    assert table_checksum(table) == before
    assert second_reader_checksum(table) == second
    assert checkpoint == {} or "unsettled_commit" in checkpoint


def test_giving_up_while_the_outcome_is_unsettled_removes_nothing(settings, spark, catalog, monkeypatch):
    table, action_id, late = _setup(settings, catalog, monkeypatch, LOST_ANSWERS["commit_state_unknown"])
    before = table_checksum(table)
    with pytest.raises(Retry):
        actions.execute(settings, action_id, spark=spark)
    # the operator (or the sweeper past its retries) gives up while the swap may still land
    out = fail_permanently(settings, action_id, "given up by the test")
    assert out["state"] == "failed", out
    late.apply_late()  # and then it lands
    assert len(_commits_of(table, action_id)) == 1
    assert _scan_rows(table) == 400
    assert table_checksum(table) == before
