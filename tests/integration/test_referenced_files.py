"""Never delete what a table references, whatever the spelling of its paths: a table location reached
through a symlink with a file added by its real path, and metadata configured outside the table."""

from __future__ import annotations

import os
import time

import pyarrow.parquet as pq
import pytest

from autooptimize.iceberg import paths, staging
from autooptimize.services import actions, tracking
from autooptimize.services.preview import preview
from tests.integration.tables import DAY1, SCHEMA, SPEC, batch, identifier, live_files, make_table

OLD = time.time() - 10 * 86400


def _age(root: str) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD), follow_symlinks=False)


def test_remove_orphans_keeps_a_file_added_by_its_real_path_under_a_symlinked_location(settings, catalog, tmp_path):
    real = tmp_path / "whreal"
    real.mkdir()
    link = tmp_path / "whlink"
    link.symlink_to(real)
    name = f"test.linked_{os.getpid()}_{time.monotonic_ns()}"
    table = catalog.create_table(name, schema=SCHEMA, partition_spec=SPEC, location=f"file://{link}/t")
    table.append(batch(0, 10))
    # a file registered by its real path, not the link's
    added = real / "t" / "data" / "day=2026-01-01" / "added-by-real-path.parquet"
    added.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(batch(100, 10), added)
    table.add_files([f"file://{added}"])
    table.refresh()
    assert f"file://{added}" in live_files(table)
    rows = table.scan().to_arrow().num_rows
    _age(str(real))

    ident = identifier(table)
    tracking.track(settings, ident)
    dry = preview(settings, ident, kind="remove_orphans", options={"min_age": "1h"})
    assert not any("added-by-real-path" in p for p in dry["plan"]["orphan_sample"]), dry["plan"]
    action_id = actions.submit(settings, ident, kind="remove_orphans", options={"min_age": "1h"}, dispatch=False)
    out = actions.execute(settings, action_id, spark=None)
    assert out["state"] in ("succeeded", "skipped"), out
    assert added.exists(), "a live data file was deleted as an orphan"
    table.refresh()
    assert table.scan().to_arrow().num_rows == rows == 20


def test_canonical_paths_resolve_links_and_spellings(tmp_path):
    real = tmp_path / "real"
    (real / "d").mkdir(parents=True)
    (real / "d" / "f").write_bytes(b"1")
    link = tmp_path / "link"
    link.symlink_to(real)
    spellings = [f"{link}/d/f", f"file:{link}/d/f", f"file://{link}/d/../d/f", f"file://{real}/d/f", f"{real}/d/./f"]
    assert len({paths.canonical(s) for s in spellings}) == 1
    assert paths.resolve("s3a://bucket/a/../b") == paths.resolve("s3://bucket/b")


@pytest.fixture
def outside_metadata(catalog, tmp_path):
    """A table whose ``write.metadata.path`` points outside its location, as another engine may set it."""
    table = make_table(catalog, {DAY1: 3}, rows=20)
    elsewhere = tmp_path / "elsewhere-metadata"
    elsewhere.mkdir()
    with table.transaction() as tx:
        tx.set_properties({"write.metadata.path": f"file://{elsewhere}"})
    table.refresh()
    return table, elsewhere


def test_no_metadata_is_written_outside_the_table(settings, catalog, outside_metadata):
    table, elsewhere = outside_metadata
    with pytest.raises(paths.PathRefused):
        staging.metadata_path(table, "probe.avro")
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    before = sorted(os.listdir(elsewhere))
    action_id = actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False)
    out = actions.execute(settings, action_id, spark=None)
    assert out["state"] == "refused" and out["reason"] == "path_refused", out
    assert sorted(os.listdir(elsewhere)) == before, "metadata was written outside the table's location"


def test_uncommitted_metadata_is_deleted_only_inside_the_table(catalog, outside_metadata, tmp_path):
    table, elsewhere = outside_metadata
    victim = elsewhere / "someone-elses.avro"
    victim.write_bytes(b"not ours")
    inside = table.location().removeprefix("file://") + "/metadata/ours-uncommitted.avro"
    with open(inside, "wb") as f:
        f.write(b"ours")
    staging.remove_files(table, [f"file://{victim}", f"file://{inside}"])
    assert victim.exists(), "a file outside the table's location was deleted"
    assert not os.path.exists(inside)


def test_spark_temporary_left_in_a_finished_actions_directory_is_removed(settings, catalog):
    table = make_table(catalog, {DAY1: 3}, rows=10)
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size="1MiB")
    merge = actions.execute(settings, actions.submit(settings, ident, partition="day=2026-01-01", dispatch=False,
                                                     options={"engine": "local"}), spark=None)
    assert merge["state"] == "succeeded", merge
    out_dir = os.path.dirname(next(p for p in live_files(table) if "/ao-" in p).removeprefix("file://"))
    temporary = os.path.join(out_dir, "_temporary", "0", "_temporary", "attempt_1", "part-0.parquet")
    os.makedirs(os.path.dirname(temporary))
    pq.write_table(batch(500, 3), temporary)
    hidden_elsewhere = table.location().removeprefix("file://") + "/data/.keep-me"
    with open(hidden_elsewhere, "w") as f:
        f.write("x")
    _age(table.location().removeprefix("file://"))
    rows = table.scan().to_arrow().num_rows
    out = actions.execute(settings, actions.submit(settings, ident, kind="remove_orphans",
                                                   options={"min_age": "1h"}, dispatch=False), spark=None)
    assert out["state"] == "succeeded", out
    assert not os.path.exists(temporary), out["plan"]
    assert os.path.exists(hidden_elsewhere), "a hidden file outside an action's directory is not ours to delete"
    table.refresh()
    assert table.scan().to_arrow().num_rows == rows
