"""benchmarks.trace builds a commit's rows in Arrow buffers (a burst commit of gigabytes built as Python
strings ran out of memory) and digests them a slice at a time; both give what the row-by-row forms gave."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest

import benchmarks.trace as trace


@pytest.mark.parametrize("rows", [0, 1, 5, 1000])
def test_the_payloads_are_each_rows_random_bytes_in_lowercase_hex_across_chunks(rows, monkeypatch):
    monkeypatch.setattr(trace, "PAYLOAD_CHUNK_ROWS", 3)  # many chunks, one of them short
    blob = np.random.default_rng([7, rows]).bytes(rows * trace.PAYLOAD_BYTES)
    width = 2 * trace.PAYLOAD_BYTES
    payloads = trace.hex_payloads(blob)
    assert payloads.to_pylist() == [blob.hex()[k * width:(k + 1) * width] for k in range(rows)]
    assert payloads.num_chunks == -(-rows // 3)


def test_a_commits_rows_are_the_same_whatever_table_they_go_to_and_the_digest_counts_every_slice(monkeypatch):
    files = (trace.FileSpec(part=trace.BASE_HOUR, rows=700, drawn_bytes=0),
             trace.FileSpec(part=trace.BASE_HOUR + 1, rows=300, drawn_bytes=0))
    data = trace.rows_for(7, 3, files, 5_000)
    assert data.equals(trace.rows_for(7, 3, files, 5_000)) and data.num_rows == 1000
    assert data.column("id").to_pylist() == list(range(5_000, 6_000))
    whole = trace.Digest().update(data)
    monkeypatch.setattr(trace, "DIGEST_SLICE_ROWS", 64)
    sliced = trace.Digest().update(data)
    assert sliced.key() == whole.key() and whole.rows == 1000 and whole.id_sum == sum(range(5_000, 6_000))
    # the hash is blake2b-64 of "id|ts|payload" over every row, summed and xor-ed
    ts = data.column("ts").cast("int64").to_pylist()
    payload = data.column("payload").to_pylist()
    hashes = [int.from_bytes(hashlib.blake2b(b"%d|%d|%s" % (i, t, p.encode()), digest_size=8).digest(), "little")
              for i, t, p in zip(range(5_000, 6_000), ts, payload, strict=True)]
    assert whole.hash_sum == sum(hashes) & trace.MASK64


@pytest.mark.parametrize("part_rows", [1, 7, 300, 999, 1000, 5000])
def test_a_commits_rows_made_a_part_at_a_time_are_exactly_its_rows_made_whole(part_rows):
    files = (trace.FileSpec(part=trace.BASE_HOUR, rows=700, drawn_bytes=0),
             trace.FileSpec(part=trace.BASE_HOUR - 2, rows=300, drawn_bytes=0))
    parts = list(trace.row_parts(7, 3, files, 5_000, part_rows))
    assert [p.num_rows for p in parts] == [min(part_rows, 1000 - k) for k in range(0, 1000, part_rows)]
    joined = pa.concat_tables(parts).combine_chunks()
    assert joined.equals(trace.rows_for(7, 3, files, 5_000).combine_chunks())


def test_a_part_must_hold_a_row():
    with pytest.raises(ValueError, match="part_rows"):
        next(trace.row_parts(7, 3, (trace.FileSpec(part=trace.BASE_HOUR, rows=5, drawn_bytes=0),), 0, 0))
