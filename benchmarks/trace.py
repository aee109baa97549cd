"""A seeded streaming-ingest trace for an ``hour(ts)``- (or ``day(ts)``-) partitioned table, and a content digest.

The trace is pure data: which simulated hours each commit touches and how many rows go to each (one
file per touched partition, as a streaming writer flushes). The rows themselves are made from
``(seed, commit index)`` alone, so the same seed gives the same bytes into any number of tables.

Shape (``make_trace``):

- simulated time starts at ``BASE`` and moves one hour every ``commits_per_hour`` commits;
- every commit writes one file into the current simulated hour, log-normal around ``median_bytes``
  (σ = ``sigma``), and with probability ``burst_p`` a burst of ``burst_bytes`` (a few MB) instead;
- late data: with probabilities ``late_p`` (1, 2 and 3 hours back) a commit also writes one smaller file
  (``late_scale`` of the size) into each of the previous hours;
- a file's rows are its drawn size divided by the measured compressed bytes per row (zstd Parquet, as
  pyiceberg writes it), so files land near the drawn sizes.

A daily member of ``benchmarks.trace_family`` (:func:`family_trace`) goes into a ``day(ts)`` table
(:data:`DAY_SPEC`): a file's partition value is then a day, and its rows' instants fall anywhere in it.

Rows: ``id`` (unique over the whole trace), ``ts`` (a random instant inside the file's partition) and
``payload`` (random hex, so files do not compress away). ``Digest`` folds rows into count, sum of ids,
and the sum and xor of a 64-bit blake2b of ``(id, ts, payload)``: equal digests mean the same multiset
of rows with overwhelming probability, and duplicates or losses always change count or sums.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, HourTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "ts", TimestamptzType(), required=True),
    NestedField(3, "payload", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=HourTransform(), name="ts_hour"))
DAY_SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"))
#: a partition grain's spec and the hours one of its partition values spans
GRAINS = {"hour": (SPEC, 1), "day": (DAY_SPEC, 24)}
ARROW = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("payload", pa.string()),
])
BASE = dt.datetime(2026, 3, 2, 0, 0, tzinfo=dt.UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
BASE_HOUR = int((BASE - EPOCH).total_seconds()) // 3600
#: the seed benchmarks.streaming draws its rows from unless told (``--seed``)
STREAMING_SEED = 7
PAYLOAD_BYTES = 96  # random bytes per row, written as 192 hex characters
HOUR_US = 3600 * 1_000_000
MASK64 = (1 << 64) - 1
DIGEST_SLICE_ROWS = 200_000


def parse_part_label(text: str) -> int:
    """The partition value of an hour label (hours since the epoch) or a day label (days since it)."""
    for form, span in (("%Y-%m-%d-%H", 3600), ("%Y-%m-%d", 86400)):
        try:
            when = dt.datetime.strptime(text, form).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
        return int((when - EPOCH).total_seconds()) // span
    raise ValueError(f"not an hour (YYYY-MM-DD-HH) or day (YYYY-MM-DD) partition label: {text!r}")


@dataclass(frozen=True)
class FileSpec:
    part: int  # partition value: hours since the epoch (days, when span_hours is 24)
    rows: int
    drawn_bytes: int  # the size the trace aimed at
    span_hours: int = 1  # hours one partition value spans: 1 for hour(ts), 24 for day(ts)


@dataclass(frozen=True)
class Commit:
    index: int
    first_id: int
    files: tuple[FileSpec, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def parts(self) -> tuple[int, ...]:
        """The partition values the commit writes to (hours or days since the epoch)."""
        return tuple(f.part for f in self.files)


@dataclass(frozen=True)
class TraceShape:
    commits: int = 300
    seed: int = 7
    commits_per_hour: int = 60
    median_bytes: int = 200_000
    sigma: float = 0.5
    burst_p: float = 0.02
    burst_bytes: tuple[int, int] = (2_000_000, 6_000_000)
    late_p: tuple[float, ...] = (0.30, 0.15, 0.08)
    late_scale: float = 0.35


def bytes_per_row(seed: int = 0, rows: int = 4000) -> float:
    """Compressed bytes per row of this trace's rows in a zstd Parquet file (measured, not assumed)."""
    sample = rows_for(seed, 0, [FileSpec(BASE_HOUR, rows, 0)], 0)
    buf = io.BytesIO()
    pq.write_table(sample, buf, compression="zstd")
    return buf.tell() / rows


def make_trace(shape: TraceShape) -> list[Commit]:
    """The commits of the trace (no rows yet: see :func:`rows_for`)."""
    rng = random.Random(shape.seed)
    per_row = bytes_per_row(shape.seed)
    commits: list[Commit] = []
    next_id = 1_000_000
    mu = math.log(shape.median_bytes)
    for i in range(shape.commits):
        current = BASE_HOUR + i // shape.commits_per_hour
        if rng.random() < shape.burst_p:
            size = rng.randint(*shape.burst_bytes)
        else:
            size = int(rng.lognormvariate(mu, shape.sigma))
        files = [FileSpec(current, max(1, round(size / per_row)), size)]
        for lag, p in enumerate(shape.late_p, start=1):
            if rng.random() < p:
                late = int(rng.lognormvariate(mu + math.log(shape.late_scale), shape.sigma))
                files.append(FileSpec(current - lag, max(1, round(late / per_row)), late))
        commit = Commit(i, next_id, tuple(files))
        next_id += commit.rows
        commits.append(commit)
    return commits


def rows_for(seed: int, index: int, files: list[FileSpec] | tuple[FileSpec, ...], first_id: int) -> pa.Table:
    """The rows of one commit: the same for the same ``(seed, index)``, whatever table they go to."""
    n = sum(f.rows for f in files)
    return next(row_parts(seed, index, files, first_id, max(1, n)), pa.Table.from_batches([], schema=ARROW))


def row_parts(seed: int, index: int, files: list[FileSpec] | tuple[FileSpec, ...], first_id: int,
              part_rows: int) -> Iterator[pa.Table]:
    """The rows of one commit (:func:`rows_for`), ``part_rows`` at a time, in order: concatenated they are
    exactly :func:`rows_for`'s, and only one part's payload is in memory at once. A burst commit of m03
    (5.7 GB on disk) built whole took this machine's 22 GB.

    The generator draws every row's ``ts`` first and then the payload bytes, 96 per row; numpy's
    ``Generator.bytes`` draws whole 32-bit words, so drawing them a part at a time continues one stream."""
    if part_rows < 1:
        raise ValueError(f"part_rows is a whole number ≥ 1, got {part_rows!r}")
    rng = np.random.default_rng([seed, index])
    n = sum(f.rows for f in files)
    ts = np.empty(n, dtype=np.int64)
    at = 0
    for f in files:
        span = f.span_hours * HOUR_US
        ts[at:at + f.rows] = f.part * span + rng.integers(0, span, size=f.rows, dtype=np.int64)
        at += f.rows
    for start in range(0, n, part_rows):
        rows = min(part_rows, n - start)
        yield pa.table({
            "id": pa.array(np.arange(first_id + start, first_id + start + rows, dtype=np.int64), pa.int64()),
            "ts": pa.array(ts[start:start + rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "payload": hex_payloads(rng.bytes(rows * PAYLOAD_BYTES)),
        }, schema=ARROW)


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
#: rows per chunk of the payload column: a string array's offsets are 32-bit, so one chunk holds < 2 GiB
PAYLOAD_CHUNK_ROWS = 1 << 20


def hex_payloads(blob: bytes) -> pa.ChunkedArray:
    """One payload per ``PAYLOAD_BYTES`` of ``blob``, the k-th the lowercase hex of ``blob[k * PAYLOAD_BYTES:(k + 1) * PAYLOAD_BYTES]``,
    built in Arrow buffers without a Python string per row: a burst commit of m03 (several GB) built as
    Python strings took more memory than this machine has."""
    raw = np.frombuffer(blob, dtype=np.uint8)
    n = raw.size // PAYLOAD_BYTES
    width = 2 * PAYLOAD_BYTES
    chunks = []
    for start in range(0, n, PAYLOAD_CHUNK_ROWS):
        rows = min(PAYLOAD_CHUNK_ROWS, n - start)
        part = raw[start * PAYLOAD_BYTES:(start + rows) * PAYLOAD_BYTES]
        text = np.empty(2 * part.size, dtype=np.uint8)
        text[0::2] = _HEX[part >> 4]
        text[1::2] = _HEX[part & 0x0F]
        offsets = np.arange(0, rows * width + 1, width, dtype=np.int32)
        chunks.append(pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(text)))
    return pa.chunked_array(chunks, type=pa.string())


def commit_rows(shape: TraceShape, commit: Commit) -> pa.Table:
    return rows_for(shape.seed, commit.index, commit.files, commit.first_id)


def commit_row_parts(shape: TraceShape, commit: Commit, part_rows: int) -> Iterator[pa.Table]:
    return row_parts(shape.seed, commit.index, commit.files, commit.first_id, part_rows)


@dataclass
class Digest:
    """Order-independent content digest: rows, Σ id, and Σ / xor of blake2b-64(id, ts, payload)."""

    rows: int = 0
    id_sum: int = 0
    hash_sum: int = 0
    hash_xor: int = 0
    null_payloads: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def update(self, data: pa.Table) -> Digest:
        for start in range(0, data.num_rows, DIGEST_SLICE_ROWS):  # a slice at a time: bounded Python objects
            self._update(data.slice(start, DIGEST_SLICE_ROWS))
        return self

    def _update(self, data: pa.Table) -> None:
        ids = data.column("id").to_pylist()
        ts = data.column("ts").cast(pa.int64()).to_pylist()
        payload = data.column("payload").to_pylist()
        s, x = self.hash_sum, self.hash_xor
        for i, t, p in zip(ids, ts, payload, strict=True):
            if p is None:
                self.null_payloads += 1
                p = ""
            h = int.from_bytes(hashlib.blake2b(b"%d|%d|%s" % (i, t, p.encode()), digest_size=8).digest(), "little")
            s = (s + h) & MASK64
            x ^= h
        self.hash_sum, self.hash_xor = s, x
        self.rows += len(ids)
        self.id_sum += sum(ids)

    def key(self) -> tuple[int, int, int, int, int]:
        return (self.rows, self.id_sum, self.hash_sum, self.hash_xor, self.null_payloads)

    def as_dict(self) -> dict[str, object]:
        return {"rows": self.rows, "id_sum": self.id_sum, "hash_sum": f"{self.hash_sum:016x}",
                "hash_xor": f"{self.hash_xor:016x}"}


#: pyiceberg's default ``write.target-file-size-bytes``. Its append cuts each partition's rows into files of
#: about this many bytes *in Arrow memory* (``bin_pack_arrow_table``), not on disk: for these rows a file of
#: about 2.5 M rows
PYICEBERG_FILE_ARROW_BYTES = 512 << 20
#: a commit of more rows than this (about 1.7 GB in Arrow) is written a part at a time
#: (``benchmarks.streaming.append_in_parts``)
WHOLE_COMMIT_ROWS = 8_000_000
#: rows per part of such a commit: about 850 MB in Arrow, two of pyiceberg's default 512 MiB write bins
PART_ROWS = 4_000_000


def hand_over_rows(total: int, whole_rows: int = WHOLE_COMMIT_ROWS, part_rows: int = PART_ROWS) -> int:
    """Rows ``benchmarks.streaming``'s writer hands pyiceberg at a time for a commit of ``total`` rows: all
    of them up to ``whole_rows``, else ``part_rows``."""
    return max(1, total) if total <= whole_rows else part_rows


def arrow_bytes_per_row(seed: int = 0, rows: int = 4000) -> float:
    """In-memory Arrow bytes per row of this trace's rows (what pyiceberg's write cut weighs)."""
    return rows_for(seed, 0, [FileSpec(BASE_HOUR, rows, 0)], 0).combine_chunks().nbytes / rows


def writer_cut(files: list[FileSpec] | tuple[FileSpec, ...], rows_per_file: int,
               whole_rows: int = WHOLE_COMMIT_ROWS, part_rows: int = PART_ROWS) -> list[tuple[int, int]]:
    """``(partition, rows)`` of each data file ``benchmarks.streaming``'s writer makes of one commit.

    The writer hands pyiceberg the commit whole when it has at most ``whole_rows`` rows, else
    ``part_rows`` rows at a time, in the order of ``files``. pyiceberg splits what it is handed by
    partition and cuts each partition's rows into files of ``rows_per_file`` rows (its 512 MiB of Arrow) and
    one of the rest. So a family file of 300 MB is two data files on the table, not one."""
    if rows_per_file < 1 or whole_rows < 1 or part_rows < 1:
        raise ValueError(f"rows_per_file, whole_rows and part_rows are whole numbers ≥ 1, got "
                         f"{rows_per_file!r}, {whole_rows!r}, {part_rows!r}")
    total = sum(f.rows for f in files)
    step = hand_over_rows(total, whole_rows, part_rows)
    out: list[tuple[int, int]] = []
    start = 0
    while start < total:
        end = min(total, start + step)
        handed: dict[int, int] = {}  # partition -> rows of this hand-over, in first-seen order
        at = 0
        for f in files:
            lo, hi = max(start, at), min(end, at + f.rows)
            if hi > lo:
                handed[f.part] = handed.get(f.part, 0) + hi - lo
            at += f.rows
        for part, rows in handed.items():
            full, rest = divmod(rows, rows_per_file)
            out.extend([(part, rows_per_file)] * full)
            if rest:
                out.append((part, rest))
        start = end
    return out


def family_trace(member: object, seed: int = STREAMING_SEED, commits: int | None = None) -> list[Commit]:
    """A member of :data:`benchmarks.trace_family.FAMILY` as commits of this module's table (``hour(ts)``
    for an hourly member, ``day(ts)`` for a daily one: :data:`GRAINS`): each family file becomes a file of
    ``round(bytes / bytes per row)`` rows in partition ``BASE_HOUR + partition`` (a daily member's:
    ``BASE_HOUR // 24 + partition``), the first ``commits`` commits only, when given. Rows are made by
    :func:`rows_for` from ``seed``."""
    from benchmarks.trace_family import Member, make_commits

    if not isinstance(member, Member):
        raise ValueError(f"not a member of benchmarks.trace_family: {member!r}")
    span = GRAINS[member.grain][1]
    base = BASE_HOUR // span
    per_row = bytes_per_row(seed)
    out: list[Commit] = []
    next_id = 1_000_000
    for i, c in enumerate(make_commits(member)[:commits]):
        files = tuple(FileSpec(base + part, max(1, round(size / per_row)), size, span) for part, size in c.files)
        commit = Commit(i, next_id, files)
        next_id += commit.rows
        out.append(commit)
    return out
