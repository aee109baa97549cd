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


def test_the_writer_cut_model_makes_the_files_pyiceberg_makes(catalog):
    """benchmarks.trace.writer_cut, which the simulator replays the family with, against the data files
    the writer really adds: pyiceberg cuts each partition's rows of what it is handed at its write target,
    weighed in Arrow bytes (here 500 rows a file, as 512 MiB is about 2.5 M rows)."""
    from benchmarks.trace import arrow_bytes_per_row, writer_cut

    table = create_table(catalog, "bench.cut")
    per_row = arrow_bytes_per_row()
    target = int(per_row * 500 + per_row / 2)  # 500 rows and a half: the cut is at 500 rows
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": str(target)})
    table = catalog.load_table("bench.cut")
    files = (FileSpec(part=BASE_HOUR, rows=1_730, drawn_bytes=0), FileSpec(part=BASE_HOUR - 2, rows=260, drawn_bytes=0),
             FileSpec(part=BASE_HOUR - 1, rows=1_020, drawn_bytes=0))
    commit = Commit(index=1, first_id=5_000, files=files)

    table, _ = append_in_parts(catalog, "bench.cut", table, TraceShape(seed=3), commit, None, part_rows=1_200)

    table.refresh()
    made = sorted((f.partition[0], f.record_count) for f in table.scan().plan_files() for f in [f.file])
    modelled = sorted(writer_cut(files, 500, whole_rows=1_200, part_rows=1_200))
    # parts of 1,200 rows: [1200 of hour 0], [530 of hour 0, 260 of hour -2, 410 of hour -1], [610 of hour -1]
    assert modelled == sorted([(BASE_HOUR, 500), (BASE_HOUR, 500), (BASE_HOUR, 200), (BASE_HOUR, 500),
                               (BASE_HOUR, 30), (BASE_HOUR - 2, 260), (BASE_HOUR - 1, 410),
                               (BASE_HOUR - 1, 500), (BASE_HOUR - 1, 110)])
    assert made == modelled
