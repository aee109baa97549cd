"""benchmarks.streaming's content check reads a table back one record batch at a time (a member of
gigabytes read whole ran out of memory), and still sees every row and every duplicate id."""

from __future__ import annotations

from benchmarks.streaming import create_table, read_back
from benchmarks.trace import BASE_HOUR, Digest, FileSpec, rows_for


def test_the_content_check_reads_every_batch_and_sees_a_duplicate_id(catalog):
    table = create_table(catalog, "bench.read_back")
    commits = [rows_for(7, k, (FileSpec(part=BASE_HOUR + k % 2, rows=300 + 50 * k, drawn_bytes=0),), 10_000 * k)
               for k in range(4)]
    expected = Digest()
    for data in commits:
        table.append(data)
        expected.update(data)
    table.refresh()
    assert len(list(table.scan().plan_files())) == 4  # four files, so more than one batch is read

    read, unique = read_back(table)
    assert read.key() == expected.key() and read.rows == sum(d.num_rows for d in commits)
    assert unique

    table.append(commits[2].slice(0, 1))  # one row written twice
    table.refresh()
    read, unique = read_back(table)
    assert read.rows == expected.rows + 1 and read.key() != expected.key()
    assert not unique
