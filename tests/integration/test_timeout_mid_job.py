"""An attempt whose action timeout falls while its Spark job runs (issue 23's finding): the job is
interrupted, nothing is committed, the attempt's output is removed, and the retry commits exactly once.
Real PostgreSQL, Redis, Spark Connect server and Iceberg tables."""

from __future__ import annotations

import pytest

from autooptimize.errors import Retry
from autooptimize.services import actions, tracking
from tests.integration.tables import DAY1, DAY2, action_outputs, identifier, live_files, make_table


@pytest.mark.spark
def test_an_attempt_timed_out_mid_job_is_retried_and_commits_once(settings, spark, catalog):
    # large enough that the rewrite's Spark job outlasts the 1 s timeout on an idle machine (about 3 s)
    table = make_table(catalog, {DAY1: 4, DAY2: 48}, rows=60_000)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="16MiB")
    # a first rewrite gives the table a measured output size, so the second plans without a calibration
    # job and its timeout falls inside the rewrite's Spark job
    first = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
    assert actions.execute(settings, first, spark=spark)["state"] == "succeeded"
    action_id = actions.submit(settings, ident, partition="day=2026-01-02", dispatch=False)
    before = set(live_files(table.refresh()))
    snapshot = table.current_snapshot().snapshot_id
    short = settings.model_copy(update={"action_timeout_seconds": 1})

    with pytest.raises(Retry, match="ran past AO_ACTION_TIMEOUT_SECONDS"):
        actions.execute(short, action_id, spark=spark)

    assert table.refresh().current_snapshot().snapshot_id == snapshot, "a timed-out attempt committed"
    out = actions.get_outcome(settings, action_id)
    assert out["state"] == "queued" and "ran past" in out["error"]
    assert not [p for p in action_outputs(table) if action_id in p], "the timed-out attempt's output must be removed"
    again = actions.execute(settings, action_id, spark=spark)
    assert (again["state"], again["attempts"]) == ("succeeded", 2), again
    table.refresh()
    assert not set(live_files(table)) & {f for f in before if "day=2026-01-02" in f}
