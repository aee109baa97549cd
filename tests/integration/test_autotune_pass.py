"""Beat's AutoAnalyze pass is bounded: it starts no new suggestion once it has run AO_AUTOTUNE_PASS_SECONDS
(the tables left go first in the next pass), and it does not replay a table again until
AO_AUTOTUNE_MIN_NEW_COMMITS writer commits landed since its last suggestion. A suggestion replays the
table's history about 200 times (up to a minute for 5,000 commits) on the control queue, beside decide."""

from __future__ import annotations

import logging
import time

import pytest
from pyiceberg.exceptions import NamespaceAlreadyExistsError

from autooptimize.iceberg.catalog import get_catalog
from autooptimize.services import tracking
from autooptimize.services.autotune import reevaluate
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from tests.integration.tables import DAY1, batch, identifier, make_table

CATALOG = "autotunepass"  # a catalog of its own: the pass reads every table tracked in its catalog


@pytest.fixture
def own(settings, tmp_path, monkeypatch):
    prefix = f"PYICEBERG_CATALOG__{CATALOG.upper()}__"
    monkeypatch.setenv(prefix + "TYPE", "sql")
    monkeypatch.setenv(prefix + "URI", settings.database_url)
    monkeypatch.setenv(prefix + "WAREHOUSE", tmp_path.as_uri())
    s = settings.model_copy(update={"catalog": CATALOG, "autotune_pass_seconds": 300,
                                    "autotune_min_new_commits": 20})
    cat = get_catalog(s)
    try:
        cat.create_namespace("test")
    except NamespaceAlreadyExistsError:
        pass
    return s, cat


def test_a_pass_defers_tables_past_its_time_then_rotates_and_skips_the_unchanged(own, spark_server, caplog):
    settings, catalog = own
    tables = [make_table(catalog, {DAY1: 22}, rows=20, name=f"pass_{k}") for k in range(3)]
    names = sorted(identifier(t) for t in tables)
    for name in names:
        tracking.track(settings, name, target_file_size="1MiB")

    caplog.set_level(logging.INFO, logger="autooptimize.services.autotune")
    ticks = iter([0.0, 0.0] + [301.0] * 10)  # the pass's start, one check before each table, the log line
    first = reevaluate(settings, clock=lambda: next(ticks))
    assert list(first) == names  # none suggested yet: by name
    assert first[names[0]] == "recorded"
    for name in names[1:]:
        assert first[name].startswith("deferred:") and "AO_AUTOTUNE_PASS_SECONDS" in first[name], first[name]
    with session_scope(settings) as session:
        done = {n: tracked_table(session, CATALOG, n).suggested_at for n in names}
    assert done[names[0]] is not None and done[names[1]] is None and done[names[2]] is None

    assert "autotune pass: 3 table(s)" in caplog.text and "2 deferred, 1 recorded" in caplog.text

    second = reevaluate(settings)
    assert list(second) == [names[1], names[2], names[0]]  # the deferred first, then the longest since
    assert second[names[1]] == second[names[2]] == "recorded"
    assert second[names[0]].startswith("unchanged: 0 writer commit(s)"), second[names[0]]
    assert "AO_AUTOTUNE_MIN_NEW_COMMITS" in second[names[0]]

    time.sleep(1.1)  # the new commits land after the suggestion's time
    grown = catalog.load_table(names[0])
    for i in range(20):
        grown.append(batch(50_000 + 20 * i, 20, DAY1))
    third = reevaluate(settings)
    assert list(third) == names  # suggested in the order the first two passes reached them
    assert third[names[0]] == "recorded"
    assert third[names[1]].startswith("unchanged") and third[names[2]].startswith("unchanged")
    with session_scope(settings) as session:
        row = tracked_table(session, CATALOG, names[0])
        assert row.suggested_at > done[names[0]] and row.suggested_tuning["commits"] == 42
        # 22 files made too few calibration groups; 42 make enough: the pass calibrated what merged files
        # weigh on the Spark executors, and the others, never calibrated, have none
        calibrated = row.suggested_tuning["output_calibration"]
        assert calibrated is not None and calibrated["engine"] == "spark" and calibrated["groups"] >= 6
        assert row.suggested_tuning["file_overhead"] == calibrated["file_overhead"]
        assert tracked_table(session, CATALOG, names[1]).suggested_tuning["output_calibration"] is None
