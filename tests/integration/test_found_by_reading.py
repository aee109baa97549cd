"""Two gaps found by reading, each proven before it was fixed: an automatic action queued before its kind
was disallowed still ran, and a consolidator that lost its table's lock still wrote the batch's
bookkeeping over the new holder's."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from autooptimize.domain.fencing import fenced
from autooptimize.errors import LeaseLost
from autooptimize.services import actions, tracking
from autooptimize.services.buffer import landing
from autooptimize.services.buffer.consolidate import claim_batch, run_batch
from autooptimize.storage.buffer_models import BufferBatch, BufferTable
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Trigger
from tests.integration.tables import DAY1, SCHEMA, SPEC, batch, files_on_disk, identifier, make_table

OLD = time.time() - 10 * 86400


def test_an_automatic_action_of_a_kind_disallowed_since_it_was_queued_does_not_run(settings, catalog):
    table = make_table(catalog, {DAY1: 2}, rows=10)
    ident = identifier(table)
    tracking.track(settings, ident, allow=["remove_orphans"])
    stray = table.location().removeprefix("file://") + "/data/stray.parquet"
    pq.write_table(batch(1000, 5), stray)
    for path in files_on_disk(table):
        os.utime(path, (OLD, OLD))
    # the hygiene sweep queued it while it was allowed; then the owner disallowed it
    action_id = actions.submit(settings, ident, kind="remove_orphans", options={"min_age": "1h"},
                               trigger=Trigger.SCHEDULE, dispatch=False)
    tracking.track(settings, ident, disallow=["remove_orphans"])
    out = actions.execute(settings, action_id, spark=None)
    assert (out["state"], out["reason"]) == ("refused", "not_allowed"), out
    assert os.path.exists(stray), "a disallowed remove_orphans deleted a file"


class LostLock:
    """The fence of a consolidator whose table lock has gone to another worker."""

    def before_commit(self, what):
        raise LeaseLost(f"lock lost; not going to {what}")

    def before_delete(self, what):
        raise LeaseLost(f"lock lost; not going to delete {what}")


@pytest.mark.spark
def test_a_consolidator_that_lost_its_lock_writes_no_bookkeeping(settings, spark, catalog, tmp_path):
    name = f"test.lostlock_{os.getpid()}_{time.monotonic_ns()}"
    catalog.create_table(name, schema=SCHEMA, partition_spec=SPEC)
    files = []
    for i in range(3):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(batch(i * 10, 10), path)
        files.append(path)
    landing.land(settings, name, files, notify=False)
    with session_scope(settings) as session:
        table_id = session.query(BufferTable.id).filter(BufferTable.identifier == name).scalar()
    batch_id = claim_batch(settings, table_id, flush_until=datetime.now(UTC) + timedelta(seconds=5))
    assert batch_id is not None

    def row():
        with session_scope(settings) as session:
            b = session.get(BufferBatch, batch_id)
            return b.attempts, b.state, b.checkpoint

    before = row()
    with fenced(LostLock()), pytest.raises(LeaseLost):
        run_batch(settings, batch_id, spark)
    assert row() == before, "a consolidator without the lock changed the batch's bookkeeping"
