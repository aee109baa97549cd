"""Merges commit while a writer commits to the same partition at ≥ 2 commits/s: the production case."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from autooptimize.iceberg.checksum import arrow_checksum, table_checksum
from autooptimize.services import actions, tracking
from tests.integration.tables import DAY1, batch, identifier, make_table

pytestmark = pytest.mark.spark

WRITERS = 3  # three pyiceberg writers, so their combined rate stays ≥ 2 commits/s on a loaded machine
RATE = 1.2  # commits per second asked of each writer; the test checks what they achieved together


def test_merges_commit_while_a_writer_appends_to_the_same_partition(settings, spark, catalog):
    table = make_table(catalog, {DAY1: 4}, rows=20, name="underwrites")
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    stop = threading.Event()
    commits: list[float] = []
    errors: list[BaseException] = []

    def writer(first_id: int) -> None:
        own = catalog.load_table(table.name())
        next_id = first_id
        while not stop.is_set():
            started = time.monotonic()
            try:
                own.append(batch(next_id, 10, DAY1))
            except BaseException as exc:  # reported by the test, never swallowed
                errors.append(exc)
                return
            commits.append(time.monotonic())
            written.append(next_id)
            next_id += 10
            stop.wait(max(0.0, 1.0 / RATE - (time.monotonic() - started)))

    written: list[int] = []
    threads = [threading.Thread(target=writer, args=(100_000 * (i + 1),), daemon=True, name=f"writer-{i}")
               for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    outcomes = []
    try:
        while len(commits) < 3:
            time.sleep(0.1)
        deadline = time.monotonic() + 600
        while sum(o["state"] == "succeeded" and o["snapshot_id"] for o in outcomes) < 3:
            assert time.monotonic() < deadline, f"merges did not commit during writes: {outcomes}"
            action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
            outcomes.append(actions.execute(settings, action_id, spark=spark))
        # the writers go on after the last merge: each merge landed between writer commits
        after = len(commits)
        while len(commits) < after + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    merged = [o for o in outcomes if o["state"] == "succeeded" and o["snapshot_id"]]
    window = (commits[-1] - commits[0]) if len(commits) > 1 else 0.0
    assert window > 0 and (len(commits) - 1) / window >= 2.0, f"writer managed {len(commits)} in {window:.1f}s"
    assert not [o for o in outcomes if o["state"] != "succeeded"], outcomes
    assert all(o["rows_in"] == o["rows_out"] and o["checksum_in"] == o["checksum_out"] for o in merged)
    # every merge landed while the writer was still committing: writer commits exist after each one
    table.refresh()
    times = {s.snapshot_id: s.timestamp_ms / 1000 for s in table.metadata.snapshots}
    last_writer_commit_ms = max(s.timestamp_ms for s in table.metadata.snapshots
                                if s.summary is not None and s.summary.operation.value == "append")
    assert all(times[o["snapshot_id"]] * 1000 < last_writer_commit_ms for o in merged[:3])
    # the content is exactly what was written: 4×20 initial rows and 10 per writer commit
    rows_written = 4 * 20 + 10 * len(commits)
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)) == rows_written
    batches = [batch(i * 20, 20, DAY1) for i in range(4)] + [batch(first, 10, DAY1) for first in written]
    assert table_checksum(table) == arrow_checksum(pa.concat_tables(batches))
