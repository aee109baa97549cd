"""Tables Iceberg's Java library wrote (1.10.2 on Spark 3.5, merge-on-read DELETE and UPDATE), optimized by
the service, then read back by Iceberg Java: rows and a content checksum equal to before; on v3 every
(_row_id, row) pair equal; Java's own rewrite_data_files and expire_snapshots still succeed afterwards.

Small tables (a few hundred rows in a few dozen files): the point is the formats, not the sizes.
"""

from __future__ import annotations

import uuid

import pytest

from autooptimize.services import actions, tracking
from autooptimize.services.explain import explain
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.java_engine import content

pytestmark = [pytest.mark.java, pytest.mark.spark]

COLUMNS = ["id", "day", "v", "s"]


def _name() -> str:
    return f"test.java_{uuid.uuid4().hex[:8]}"


def _create(java, name: str, version: int, *, extra: str = "") -> None:
    """A table partitioned by day with merge-on-read deletes and updates, 32 small files of 10 rows (each
    INSERT writes one file per day)."""
    java.run(
        f"CREATE TABLE {name} (id bigint, day date, v double, s string) USING iceberg PARTITIONED BY (day) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        f"'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'{extra})",
        *[f"INSERT INTO {name} SELECT id, date_add(DATE'2026-01-01', CAST(id % 2 AS int)), id * 1.5, "
          f"concat('r', CAST(id AS string)) FROM range({i * 20}, {i * 20 + 20})" for i in range(16)],
    )


def _read(java, name: str, lineage: bool = False) -> list[dict]:
    extra = "_row_id, _last_updated_sequence_number, " if lineage else ""
    return java.rows(f"SELECT {extra}* FROM {name}")


def _state(java, name: str) -> tuple[int, str]:
    return content(_read(java, name))


def _run(settings, spark, name: str, kind: str | None = None, **kw) -> dict:
    tracking.track(settings, name, target_file_size="1MiB")
    action_id = actions.submit(settings, name, kind=kind, dispatch=False, **kw)
    return actions.execute(settings, action_id, spark=spark)


def _java_maintenance_still_works(java, name: str) -> None:
    java.run(f"CALL system.rewrite_data_files(table => '{name}', options => map('min-input-files','2'))",
             f"CALL system.expire_snapshots(table => '{name}', older_than => TIMESTAMP '2999-01-01 00:00:00', "
             "retain_last => 1)")


def test_v2_position_deletes_written_by_java_are_folded(settings, spark, catalog, iceberg_java):
    name = _name()
    _create(iceberg_java, name, 2)
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0", f"UPDATE {name} SET v = -v WHERE id % 11 = 0")
    before = _state(iceberg_java, name)
    table = catalog.load_table(name)
    assert table.metadata.format_version == 2
    assert any(r["content"] == 1 for r in table.inspect.files().to_pylist()), "Java wrote position deletes"

    explained = explain(settings, name)
    assert {p["action"] for p in explained["partitions"]} == {"compact_deletes"}, explained

    out = _run(settings, spark, name, kind="compact_deletes", partition=None)
    assert out["state"] == "succeeded", out
    table.refresh()
    assert not [r for r in table.inspect.files().to_pylist() if r["content"] != 0]
    assert _state(iceberg_java, name) == before
    _java_maintenance_still_works(iceberg_java, name)
    assert _state(iceberg_java, name) == before


def _lineage(java, name: str) -> set[tuple]:
    """Every (_row_id, _last_updated_sequence_number, row) of the table as Iceberg Java reads it."""
    return {tuple(sorted((k, str(v)) for k, v in r.items())) for r in _read(java, name, lineage=True)}


def _optimized_as_decided(settings, spark, java, name: str, *, v3: bool, also: tuple[str, ...] = ()) -> dict:
    """Run what explain decides for each partition, then each kind in ``also``; Iceberg Java must read the
    same rows (and on v3 the same lineage) after each, and its own maintenance must still succeed."""
    before = _state(java, name)
    lineage = _lineage(java, name) if v3 else None
    explained = explain(settings, name)
    decided = sorted({p["action"] for p in explained["partitions"] if p["action"] != "none"})
    outcomes = {}
    for kind in [*decided, *[k for k in also if k not in decided]]:
        out = _run(settings, spark, name, kind=kind, partition=None)
        assert out["state"] in ("succeeded", "skipped"), out
        outcomes[kind] = out
        assert _state(java, name) == before, kind
        if v3:
            assert _lineage(java, name) == lineage, kind
    assert any(o["state"] == "succeeded" for o in outcomes.values()), outcomes
    _java_maintenance_still_works(java, name)
    assert _state(java, name) == before
    if v3:
        assert _lineage(java, name) == lineage
    return {"decided": decided, "outcomes": outcomes}


# the default engine (pyarrow tasks of one Spark job on the executors) and the worker's own (local); a v3
# table never takes spark_sql (Spark's Parquet IO carries no row lineage), asking for it runs the default
V3_ENGINES = pytest.mark.parametrize("engine", [{}, {"engine": "local"}, {"engine": "spark_sql"}],
                                     ids=["spark", "local", "spark_sql"])


def _engines_used(settings, out: dict) -> set[str]:
    with session_scope(settings) as s:
        return {g["engine"] for g in get_action(s, out["id"]).checkpoint["groups"]}


@V3_ENGINES
def test_v3_deletion_vectors_written_by_java_are_folded_keeping_row_lineage(settings, spark, catalog, iceberg_java,
                                                                           engine):
    name = _name()
    _create(iceberg_java, name, 3)
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0", f"UPDATE {name} SET v = -v WHERE id % 11 = 0",
                     f"UPDATE {name} SET s = 'again' WHERE id % 13 = 0")
    before, lineage = _state(iceberg_java, name), _lineage(iceberg_java, name)
    assert all(r[0] is not None for r in lineage)
    table = catalog.load_table(name)
    assert table.metadata.format_version == 3
    assert any(r["file_format"] == "PUFFIN" for r in table.inspect.files().to_pylist()), "Java wrote DVs"

    explained = explain(settings, name)
    assert {p["action"] for p in explained["partitions"]} == {"compact_deletes"}, explained
    out = _run(settings, spark, name, kind="compact_deletes", partition=None, options=engine)
    assert out["state"] == "succeeded", out
    # spark_sql carries no lineage: asking for it runs the executor task (spark)
    assert _engines_used(settings, out) == {"local" if engine.get("engine") == "local" else "spark"}
    table.refresh()
    assert not [r for r in table.inspect.files().to_pylist() if r["content"] != 0]
    assert _state(iceberg_java, name) == before
    assert _lineage(iceberg_java, name) == lineage
    _java_maintenance_still_works(iceberg_java, name)
    assert _state(iceberg_java, name) == before
    assert _lineage(iceberg_java, name) == lineage


@V3_ENGINES
def test_v3_merge_folds_deletion_vectors_of_its_inputs_and_keeps_row_lineage(settings, spark, catalog, iceberg_java,
                                                                            engine):
    name = _name()
    _create(iceberg_java, name, 3)
    for step in range(3):  # several UPDATEs: DVs replaced by newer ones, rows moved to new files
        iceberg_java.run(f"UPDATE {name} SET v = v + 1 WHERE id % 5 = {step}")
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 9 = 0")
    before, lineage = _state(iceberg_java, name), _lineage(iceberg_java, name)
    table = catalog.load_table(name)
    files_before = len([r for r in table.inspect.files().to_pylist() if r["content"] == 0])

    out = _run(settings, spark, name, kind="merge", partition=None, options=engine)
    assert out["state"] == "succeeded", out
    assert not out.get("skipped"), out
    assert _engines_used(settings, out) == {"local" if engine.get("engine") == "local" else "spark"}
    table.refresh()
    files = table.inspect.files().to_pylist()
    assert not [r for r in files if r["content"] != 0], "the DVs went with their data files"
    assert len(files) < files_before / 5
    snapshot = table.current_snapshot()
    assert snapshot.first_row_id is not None and snapshot.added_rows is not None
    assert table.metadata.next_row_id == snapshot.first_row_id + snapshot.added_rows
    assert _state(iceberg_java, name) == before
    assert _lineage(iceberg_java, name) == lineage
    _java_maintenance_still_works(iceberg_java, name)
    assert _state(iceberg_java, name) == before
    assert _lineage(iceberg_java, name) == lineage


@pytest.mark.parametrize("kind,options", [("sort", {"sort_order": "v"}), ("zorder", {"zorder_columns": "id, v"})])
def test_v3_sort_and_zorder_are_refused_before_writing(settings, spark, catalog, iceberg_java, kind, options):
    name = _name()
    _create(iceberg_java, name, 3)
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0")
    before = _state(iceberg_java, name)
    table = catalog.load_table(name)
    snapshot = table.current_snapshot().snapshot_id

    out = _run(settings, spark, name, kind=kind, partition=None, options=options)
    assert out["state"] == "refused" and out["reason"] == "v3_lineage_not_supported", out
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
    assert _state(iceberg_java, name) == before


def test_v2_table_upgraded_to_v3_with_old_position_deletes_live(settings, spark, catalog, iceberg_java):
    name = _name()
    _create(iceberg_java, name, 2)
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0",
                     f"ALTER TABLE {name} SET TBLPROPERTIES ('format-version'='3')",
                     f"DELETE FROM {name} WHERE id % 10 = 3")  # DVs now, beside the v2 position delete files
    table = catalog.load_table(name)
    assert table.metadata.format_version == 3
    formats = {r["file_format"] for r in table.inspect.files().to_pylist() if r["content"] == 1}
    assert formats == {"PARQUET", "PUFFIN"}, formats
    done = _optimized_as_decided(settings, spark, iceberg_java, name, v3=True, also=("compact_deletes", "merge"))
    assert "compact_deletes" in done["decided"]
    table.refresh()
    assert not [r for r in table.inspect.files().to_pylist() if r["content"] != 0]


def test_partition_evolution_with_files_in_both_specs(settings, spark, catalog, iceberg_java):
    for version in (2, 3):
        name = _name()
        iceberg_java.run(
            f"CREATE TABLE {name} (id bigint, cat string, ts timestamp) USING iceberg PARTITIONED BY (cat) "
            f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')",
            *[f"INSERT INTO {name} SELECT id, concat('c', CAST(id % 2 AS string)), "
              f"timestamp_seconds(1767225600 + id * 3600) FROM range({i * 10}, {i * 10 + 10})" for i in range(12)],
            f"ALTER TABLE {name} REPLACE PARTITION FIELD cat WITH days(ts)",
            *[f"INSERT INTO {name} SELECT id, concat('c', CAST(id % 2 AS string)), "
              f"timestamp_seconds(1767225600 + id * 3600) FROM range({i * 10}, {i * 10 + 10})" for i in range(12, 24)],
            f"DELETE FROM {name} WHERE id % 6 = 0",
        )
        table = catalog.load_table(name)
        assert {r["spec_id"] for r in table.inspect.files().to_pylist()} == {0, 1}
        done = _optimized_as_decided(settings, spark, iceberg_java, name, v3=version == 3,
                                     also=("compact_deletes", "merge"))
        print(version, {k: (o["state"], o.get("reason"), o.get("files_in"), o.get("files_out"))
                        for k, o in done["outcomes"].items()})


def test_schema_evolution_written_by_java(settings, spark, catalog, iceberg_java):
    for version in (2, 3):
        name = _name()
        iceberg_java.run(
            f"CREATE TABLE {name} (id int, f float, name string, gone string) USING iceberg "
            f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read')",
            *[f"INSERT INTO {name} SELECT CAST(id AS int), CAST(id / 4 AS float), concat('n', CAST(id AS string)), "
              f"'x' FROM range({i * 10}, {i * 10 + 10})" for i in range(10)],
            f"ALTER TABLE {name} ALTER COLUMN id TYPE bigint",
            f"ALTER TABLE {name} ALTER COLUMN f TYPE double",
            f"ALTER TABLE {name} RENAME COLUMN name TO label",
            f"ALTER TABLE {name} DROP COLUMN gone",
            f"ALTER TABLE {name} ADD COLUMN extra string",
            *[f"INSERT INTO {name} SELECT id, id / 4.0, concat('n', CAST(id AS string)), 'e' "
              f"FROM range({i * 10}, {i * 10 + 10})" for i in range(10, 20)],
            f"DELETE FROM {name} WHERE id % 7 = 0",
            f"UPDATE {name} SET extra = 'u' WHERE id % 5 = 0",
        )
        done = _optimized_as_decided(settings, spark, iceberg_java, name, v3=version == 3,
                                     also=("compact_deletes", "merge"))
        print(version, {k: (o["state"], o.get("reason"), o.get("files_in"), o.get("files_out"))
                        for k, o in done["outcomes"].items()})


def test_equality_deletes_are_folded_on_v2_and_v3(settings, spark, catalog, iceberg_java):
    """Equality deletes (written by our tests: Spark SQL writes none) on tables Java wrote, beside its DVs
    or position deletes; Java reads the result back."""
    from autooptimize.iceberg.deletes import commit_delete_files, scope_of, write_equality_deletes

    for version in (2, 3):
        name = _name()
        _create(iceberg_java, name, version)
        iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0")
        table = catalog.load_table(name)
        files = [r for r in table.inspect.files().to_pylist() if r["content"] == 0]
        scope = scope_of(table, files[0]["file_path"])
        day = files[0]["partition"]["day"]
        gone = [r["id"] for r in _read(iceberg_java, name) if str(r["day"]) == str(day)][:6]
        commit_delete_files(table, [write_equality_deletes(table, scope, ["id"], [{"id": i} for i in gone])])
        expected = [r for r in _read(iceberg_java, name)]
        assert not {r["id"] for r in expected} & set(gone), "Java applies our equality deletes"
        lineage = _lineage(iceberg_java, name) if version == 3 else None

        out = _run(settings, spark, name, kind="compact_deletes", partition=None)
        assert out["state"] == "succeeded", out
        table.refresh()
        assert not [r for r in table.inspect.files().to_pylist() if r["content"] != 0]
        assert _state(iceberg_java, name) == content(expected)
        if version == 3:
            assert _lineage(iceberg_java, name) == lineage
        _java_maintenance_still_works(iceberg_java, name)
        assert _state(iceberg_java, name) == content(expected)


def test_compacting_one_partition_keeps_the_other_dvs_of_a_shared_puffin_file(settings, spark, catalog, iceberg_java):
    """One Java DELETE writes the DVs of many data files into one Puffin file, each its own manifest entry:
    folding one partition removes its DVs and none of the others in that file."""
    name = _name()
    _create(iceberg_java, name, 3)
    iceberg_java.run(f"DELETE FROM {name} WHERE id % 7 = 0")
    before, lineage = _state(iceberg_java, name), _lineage(iceberg_java, name)
    table = catalog.load_table(name)
    dvs = [r for r in table.inspect.files().to_pylist() if r["content"] == 1]
    by_file: dict[str, list] = {}
    for r in dvs:
        by_file.setdefault(r["file_path"], []).append(r)
    assert max(len(v) for v in by_file.values()) > 1, "Java shares a Puffin file between DVs"

    out = _run(settings, spark, name, kind="compact_deletes", partition="day=2026-01-01")
    assert out["state"] == "succeeded", out
    table.refresh()
    left = [r for r in table.inspect.files().to_pylist() if r["content"] == 1]
    assert left and all(str(r["partition"]["day"]) == "2026-01-02" for r in left)
    assert len(left) == len([r for r in dvs if str(r["partition"]["day"]) == "2026-01-02"])
    assert _state(iceberg_java, name) == before
    assert _lineage(iceberg_java, name) == lineage


def test_files_without_field_ids_added_by_java_under_a_name_mapping(settings, spark, catalog, iceberg_java, tmp_path):
    """Java's add_files brings plain Parquet (no field ids) in under a name mapping; merge reads them by
    name and writes them back with field ids, on v2 and v3."""
    for version in (2, 3):
        name = _name()
        source = tmp_path / f"plain{version}"
        iceberg_java.run(
            f"CREATE TABLE {name} (id bigint, s string) USING iceberg "
            f"TBLPROPERTIES ('format-version'='{version}')",
            *[f"INSERT INTO {name} SELECT id, concat('r', CAST(id AS string)) FROM range({i * 10}, {i * 10 + 10})"
              for i in range(3)],
            f"CREATE TABLE plain_src_{version} USING parquet LOCATION '{source}' AS "
            "SELECT id, concat('p', CAST(id AS string)) AS s FROM range(100, 130)",
            f"CALL system.add_files(table => '{name}', source_table => '`parquet`.`{source}`')",
        )
        table = catalog.load_table(name)
        assert "schema.name-mapping.default" in table.properties
        done = _optimized_as_decided(settings, spark, iceberg_java, name, v3=version == 3, also=("merge",))
        assert done["outcomes"]["merge"]["state"] == "succeeded", done
