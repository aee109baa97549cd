"""A consolidation batch commits exactly once even when expiry runs between its commit and its
bookkeeping (real tables, PostgreSQL, Spark Connect)."""

from __future__ import annotations

import itertools
import os
import time

import pyarrow.parquet as pq
import pytest

from autooptimize.services import actions, tracking
from autooptimize.services.buffer.batch_commit import BATCH_ID_PROPERTY
from autooptimize.services.buffer.consolidate import consolidate_table
from autooptimize.services.buffer.hooks import BufferHooks
from autooptimize.services.buffer.landing import land
from tests.integration.tables import DAY1, DAY2, SCHEMA, SPEC, batch

pytestmark = pytest.mark.spark
_names = itertools.count()


class Crash(BaseException):
    """Stands for the worker dying at a chosen point (not an Exception: nothing may catch it)."""


def _ids(table) -> list[int]:
    table.refresh()
    return sorted(table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())


def _die(_snapshot_id: int) -> None:
    raise Crash()


def test_a_batch_whose_commit_is_not_recorded_survives_expiry_and_is_not_committed_again(
        settings, spark, catalog, tmp_path):
    table = catalog.create_table(f"test.expiry_{next(_names)}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = ".".join(table.name()[-2:])
    files = []
    for i in range(4):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(batch(i * 10, 10, DAY1), path)
        files.append(path)
    land(settings, ident, files, notify=False)

    # the worker dies after the catalog took the batch's snapshot, before PostgreSQL recorded it
    with pytest.raises(Crash):
        consolidate_table(settings, ident, spark=spark, flush=True, hooks=BufferHooks(after_commit=_die))
    table.refresh()
    batch_snapshot = table.current_snapshot()
    batch_id = batch_snapshot.summary[BATCH_ID_PROPERTY]
    table.append(batch(1000, 5, DAY2))  # another writer: the batch's snapshot is no longer the head
    time.sleep(1.1)
    tracking.track(settings, ident)
    expire = actions.execute(settings, actions.submit(
        settings, ident, kind="expire_snapshots", dispatch=False,
        options={"older_than": "1s", "allow_short_retention": "true", "retain_last": 1}), spark=None)
    assert expire["state"] in ("succeeded", "skipped"), expire
    table.refresh()
    assert table.metadata.snapshot_by_id(batch_snapshot.snapshot_id) is not None, \
        "expiry removed the snapshot of a batch whose commit PostgreSQL has not recorded"
    assert expire["plan"]["kept"].get("unrecorded_batch") == 1

    out = consolidate_table(settings, ident, spark=spark, flush=True)

    assert [(b["batch"], b["state"], b["reason"]) for b in out["batches"]] == [(batch_id, "done", "already_committed")]
    assert _ids(table) == list(range(40)) + list(range(1000, 1005)), "a row was committed twice, or lost"
    table.refresh()
    assert len([s for s in table.metadata.snapshots if s.summary.get(BATCH_ID_PROPERTY) == batch_id]) == 1

    # once recorded, the batch's snapshot is an ordinary one: expiry may take it
    time.sleep(1.1)
    again = actions.execute(settings, actions.submit(
        settings, ident, kind="expire_snapshots", dispatch=False,
        options={"older_than": "1s", "allow_short_retention": "true", "retain_last": 1}), spark=None)
    assert again["state"] == "succeeded", again
    table.refresh()
    assert table.metadata.snapshot_by_id(batch_snapshot.snapshot_id) is None
    assert _ids(table) == list(range(40)) + list(range(1000, 1005))


def test_a_batch_whose_snapshot_another_engine_expired_is_not_committed_again(settings, spark, catalog, tmp_path):
    """Expired elsewhere (not by us): the batch's checkpointed outputs, live in the table, say it landed."""
    from pyiceberg.table.update import AssertTableUUID, RemoveSnapshotsUpdate

    table = catalog.create_table(f"test.expiry_{next(_names)}_{os.getpid()}", schema=SCHEMA, partition_spec=SPEC)
    ident = ".".join(table.name()[-2:])
    path = tmp_path / "in.parquet"
    pq.write_table(batch(0, 10, DAY1), path)
    land(settings, ident, [path], notify=False)
    with pytest.raises(Crash):
        consolidate_table(settings, ident, spark=spark, flush=True, hooks=BufferHooks(after_commit=_die))
    table.refresh()
    batch_snapshot = table.current_snapshot()
    table.append(batch(1000, 5, DAY2))
    table.catalog.commit_table(table, (AssertTableUUID(uuid=table.metadata.table_uuid),),
                               (RemoveSnapshotsUpdate(snapshot_ids=[batch_snapshot.snapshot_id]),))
    table.refresh()
    assert table.metadata.snapshot_by_id(batch_snapshot.snapshot_id) is None

    out = consolidate_table(settings, ident, spark=spark, flush=True)

    assert [(b["state"], b["reason"]) for b in out["batches"]] == [("done", "already_committed")], out
    assert out["batches"][0]["snapshot_id"] == batch_snapshot.snapshot_id
    assert _ids(table) == list(range(10)) + list(range(1000, 1005)), "a row was committed twice"
