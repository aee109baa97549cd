"""benchmarks.streaming's writer appends a commit too big to hold whole (m03's 5.7 GB burst took the
machine's 22 GB) a part at a time, as one snapshot with exactly the commit's rows."""

from __future__ import annotations

from benchmarks.streaming import WRITER_PROP, append_in_parts, create_table, read_back
from benchmarks.trace import BASE_HOUR, Commit, Digest, FileSpec, TraceShape, commit_rows


def test_a_commit_appended_in_parts_is_one_snapshot_of_exactly_its_rows(catalog):
    table = create_table(catalog, "bench.parts")
    shape = TraceShape(seed=11)
    files = (FileSpec(part=BASE_HOUR, rows=2_500, drawn_bytes=0), FileSpec(part=BASE_HOUR - 1, rows=700, drawn_bytes=0))
    commit = Commit(index=4, first_id=90_000, files=files)
    before = len(table.metadata.snapshots)

    written = Digest()
    table, failures = append_in_parts(catalog, "bench.parts", table, shape, commit, written, part_rows=1_000)

    assert failures == 0
    table.refresh()
    assert len(table.metadata.snapshots) == before + 1
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.get(WRITER_PROP) == "4"
    # four parts, one of them across both partitions: five files, none of them more than a part
    assert int(snapshot.summary.get("added-data-files") or 0) == 5
    whole = Digest().update(commit_rows(shape, commit))
    read, unique = read_back(table)
    assert written.key() == whole.key() == read.key() and read.rows == 3_200 and unique


def test_freeing_the_service_table_deletes_its_files_and_nothing_outside_the_benchmarks_home(catalog, settings,
                                                                                           tmp_path):
    from pathlib import Path

    import pytest

    from benchmarks.streaming import free_table
    from benchmarks.trace import rows_for

    table = create_table(catalog, "bench.freed")
    table.append(rows_for(7, 1, (FileSpec(part=BASE_HOUR, rows=500, drawn_bytes=0),), 0))
    location = Path(table.location().removeprefix("file://"))
    assert any(location.rglob("*.parquet"))

    with pytest.raises(RuntimeError, match="outside the benchmark's"):
        free_table(catalog, "bench.freed", tmp_path)  # a home the table is not in: nothing changes
    assert catalog.load_table("bench.freed").current_snapshot() is not None and location.exists()

    freed = free_table(catalog, "bench.freed", Path(settings.home))
    assert freed > 0 and not location.exists()
    assert not catalog.table_exists("bench.freed")
