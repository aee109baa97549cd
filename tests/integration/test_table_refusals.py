"""A table this version cannot rewrite faithfully is refused as a whole, before any work: the reason names
what was found, explain and status --json show it, the audit log holds it once (not once per look), and
nothing is written to the table."""

from __future__ import annotations

import json
import logging
import os

import pytest
from sqlalchemy import create_engine, select, text

from autooptimize.errors import TableRefused
from autooptimize.iceberg.deletes import commit_delete_files, scope_of, write_equality_deletes
from autooptimize.iceberg.internals import set_slot
from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.services.overview import tables_overview
from autooptimize.services.status import all_status, table_status
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import AuditLog
from tests.integration.tables import DAY1, identifier, make_table

pytestmark = pytest.mark.spark


def _refusals(settings, name: str) -> list[dict]:
    with session_scope(settings) as session:
        rows = session.execute(select(AuditLog.detail).where(AuditLog.event == "table.refused")).scalars().all()
    return [r for r in rows if r.get("table") == name]


def _files_under(location: str) -> set[str]:
    root = location.removeprefix("file://")
    return {os.path.join(d, f) for d, _, files in os.walk(root) for f in files}


def _point_at(settings, name: str, metadata_location: str) -> None:
    """Swap the SQL catalog's pointer as another engine's commit would."""
    engine = create_engine(settings.database_url)
    namespace, table_name = name.split(".")
    with engine.begin() as conn:
        conn.execute(text("UPDATE iceberg_tables SET metadata_location = :m WHERE table_namespace = :n "
                          "AND table_name = :t"), {"m": metadata_location, "n": namespace, "t": table_name})
    engine.dispose()


def _check_refused(settings, spark, name: str, location: str, reason: str, words: str, caplog) -> None:
    before = _files_under(location)
    with caplog.at_level(logging.ERROR, logger="autooptimize.services.table_refusals"):
        for _ in range(3):  # explain and status, again and again: audited and logged once
            explained = explain(settings, name)
            status = table_status(settings, name)
            assert explained["refused"]["reason"] == reason and status["refused"]["reason"] == reason
            assert words in explained["refused"]["message"]
            json.dumps(status)  # what status --json prints
    assert len(_refusals(settings, name)) == 1
    assert len([r for r in caplog.records if name in r.getMessage()]) == 1
    for kind in ("merge", "compact_deletes"):
        try:
            action_id = actions.submit(settings, name, kind=kind, dispatch=False)
        except TableRefused as refused:  # the table's metadata cannot be read at all
            assert refused.reason == reason
            continue
        out = actions.execute(settings, action_id, spark=spark)  # refused while planning, before any write
        assert (out["state"], out["reason"]) == ("refused", reason), out
    assert _files_under(location) == before, "nothing was written to the table"


def test_format_version_4_is_refused_with_its_reason(settings, spark, catalog, caplog):
    table = make_table(catalog, {DAY1: 3}, rows=10, name="v4")
    name = identifier(table)
    tracking.track(settings, name)  # tracked before another engine's commit made it a v4 table
    path = table.metadata_location.removeprefix("file://")
    with open(path) as f:
        metadata = json.load(f)
    metadata["format-version"] = 4
    v4 = path.replace(".metadata.json", "-v4.metadata.json")
    with open(v4, "w") as f:
        json.dump(metadata, f)
    _point_at(settings, name, "file://" + v4)
    _check_refused(settings, spark, name, table.location(), "unsupported_format_version", "format version 4", caplog)
    # status of every table, and the console's overview, name the refused table beside the others
    healthy = make_table(catalog, {DAY1: 1}, rows=10, name="beside_v4")
    tracking.track(settings, identifier(healthy))
    lines = {line["table"]: line for line in all_status(settings)}
    assert lines[name]["refused"]["reason"] == "unsupported_format_version"
    assert "format version 4" in lines[name]["error"]
    assert lines[identifier(healthy)]["files"] == 1
    overview = {entry["table"]: entry for entry in tables_overview(settings)}
    assert overview[name]["health"] == "error" and "refused" in overview[name]["error"]
    assert overview[identifier(healthy)]["health"] == "healthy"


def test_an_unknown_delete_file_content_is_refused_with_its_reason(settings, spark, catalog, caplog, monkeypatch):
    table = make_table(catalog, {DAY1: 3}, rows=10, name="content")
    name = identifier(table)
    first = str(table.inspect.files().to_pylist()[0]["file_path"])
    delete = write_equality_deletes(table, scope_of(table, first), ["id"], [{"id": 1}])
    set_slot(delete, 0, 3)  # a content the spec does not define (0 data, 1 position, 2 equality deletes)
    with monkeypatch.context() as patched:  # pyiceberg's summary would refuse to count it
        patched.setattr("autooptimize.iceberg.staging._collector", lambda *_: {})
        commit_delete_files(table, [delete])
    _check_refused(settings, spark, name, table.location(), "unsupported_delete_content", "DataFileContent", caplog)
