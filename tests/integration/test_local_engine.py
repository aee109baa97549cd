"""The ``local`` engine is the single-machine option: a merge or sort under it runs, as the worker runs it
(``spark="session"``), with no Spark Connect server reachable at all, and verifies and commits as usual."""

from __future__ import annotations

import socket

import pytest

from autooptimize.iceberg.checksum import table_checksum
from autooptimize.services import actions, tracking
from tests.integration.tables import DAY1, identifier, live_files, make_table


def _closed_port() -> int:
    with socket.socket() as s:  # bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", ["merge", "sort"])
def test_the_local_engine_rewrites_without_any_spark_server(settings, catalog, kind):
    nowhere = settings.model_copy(update={"rewrite_engine": "local", "spark_remote": f"sc://127.0.0.1:{_closed_port()}"})
    table = make_table(catalog, {DAY1: 6}, rows=40, name=f"local_{kind}")
    ident = identifier(table)
    tracking.track(nowhere, ident, target_file_size="1MiB", sort_order="id" if kind == "sort" else None)
    before, files_before = table_checksum(table), len(live_files(table))

    out = actions.execute(nowhere, actions.submit(nowhere, ident, kind=kind, dispatch=False))  # spark="session"

    assert out["state"] == "succeeded", out
    assert out["rows_in"] == out["rows_out"] == 6 * 40 and out["checksum_in"] == out["checksum_out"]
    table.refresh()
    assert table_checksum(table) == before
    assert len(live_files(table)) < files_before
    assert "session" not in out["timings"]  # no Spark session was asked for
