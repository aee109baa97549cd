"""What one task of an action's Spark job (spark_actors/action_job.py) does with one group, on an executor.

Each function reads the group's inputs through the table's FileIO, writes the outputs, then reads the
outputs back with a second, independent reader (plain pyarrow by Parquet field id,
autooptimize/iceberg/checksum.parquet_digest) and reads their footers into DataFiles. It returns only
a :class:`GroupWritten`: paths, DataFiles, rows and digests in and out, timings. The service's worker
compares those figures (services/rewrite/verify.verify_group) and commits; it opens no data file.

A task Spark runs again (its executor died) first removes what the earlier attempt left in the
group's directory: the directory belongs to this action's group alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.arrow.consolidate import consolidate_files_arrow
from autooptimize.arrow.deletes import compact_group_arrow
from autooptimize.arrow.partition import check_partition
from autooptimize.arrow.rewrite import rewrite_group_arrow
from autooptimize.engines.digest import DigestAccumulator
from autooptimize.iceberg.checksum import parquet_digest
from autooptimize.iceberg.commit import data_file_from_footer
from autooptimize.iceberg.paths import delete_file, delete_tree
from autooptimize.iceberg.v3 import with_lineage


@dataclass(frozen=True)
class GroupWritten:
    """A group written and read back on an executor."""

    paths: tuple[str, ...]
    partitions: tuple[tuple[int, Record], ...]  # (spec id, partition) of each output
    data_files: tuple[DataFile, ...]  # from each output's footer
    rows_in: int  # rows the writer read
    checksum_in: str  # digest of the rows it read (or kept, with deletes applied), observed as it wrote
    rows_out: int  # rows of the outputs read back by field id
    checksum_out: str
    rows_deleted: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    # v3: (rows, checksum) with _row_id and _last_updated_sequence_number, as kept and as read back
    lineage_in: tuple[int, str] | None = None
    lineage_out: tuple[int, str] | None = None


#: Beside a group's directory while a task writes it (``<directory>.writing``): a fenced attempt's output is
#: touched only once its tasks are gone or this marker is (services/rewrite/outputs.still_writing).
WRITING_SUFFIX = ".writing"


def _fresh_directory(table: Table, directory: str, attempt: int) -> None:
    """A retried task starts from an empty directory (the first attempt requires one: check_writable)."""
    if attempt > 0:
        delete_tree(table.location(), directory, table.io)


@contextlib.contextmanager
def writing(table: Table, directory: str) -> Iterator[None]:
    """The ``.writing`` marker beside ``directory`` for the duration of the block (left by a killed task:
    its attempt's fence then waits out a grace period)."""
    marker = directory.rstrip("/") + WRITING_SUFFIX
    with table.io.new_output(marker).create(overwrite=True) as stream:
        stream.write(b"")
    try:
        yield
    finally:
        table.io.delete(marker)


def _read_back(table: Table, paths: list[str], partitions: list[tuple[int, Record]], sort_order_id: int | None,
               seconds: dict[str, float]) -> tuple[Any, list[DataFile]]:
    started = time.monotonic()
    digest = parquet_digest(table.schema(), paths, table.io)
    seconds["read_back"] = time.monotonic() - started
    started = time.monotonic()
    files = [data_file_from_footer(table, p, sid, record, sort_order_id)
             for p, (sid, record) in zip(paths, partitions, strict=True)]
    seconds["footers"] = time.monotonic() - started
    return digest, files


def rewrite_group(table: Table, inputs: list[DataFile], directory: str, files_out: int, codec: str,
                  spec_id: int | None, input_partition: tuple[int, Record] | None, sort: list[Any] | None,
                  zorder: list[Any] | None, sort_order_id: int | None, *, attempt: int = 0) -> GroupWritten:
    """A merge, sort, z-order or respec group (autooptimize.arrow.rewrite.rewrite_group_arrow), read back.

    With ``spec_id`` (a respec) each output is also checked to hold only rows of the partition it is
    recorded under."""
    _fresh_directory(table, directory, attempt)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    spec = table.metadata.specs()[spec_id] if spec_id is not None else None
    with writing(table, directory):
        written = rewrite_group_arrow(table, inputs, directory, files_out, codec, spec=spec,
                                      input_partition=input_partition, sort=sort, zorder=zorder)
    seconds["read_write"] = time.monotonic() - started
    paths, partitions = list(written.paths), list(written.partitions)
    digest, files = _read_back(table, paths, partitions, sort_order_id, seconds)
    if spec is not None:
        for path, partition in zip(paths, partitions, strict=True):
            check_partition(table, spec, path, partition)
    return GroupWritten(tuple(paths), tuple(partitions), tuple(files), written.rows_in, written.checksum_in,
                        digest.rows, digest.checksum, seconds=seconds)


def compact_group(table: Table, data_files: list[tuple[DataFile, int]], deletes: list[Any], directory: str,
                  files_out: int, codec: str, partition: tuple[int, Record], *, attempt: int = 0) -> GroupWritten:
    """A delete compaction group (autooptimize.arrow.deletes.compact_group_arrow), read back; an output
    that holds no row (every row deleted) is removed."""
    _fresh_directory(table, directory, attempt)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    with writing(table, directory):
        written = compact_group_arrow(table, data_files, deletes, directory, files_out, codec, partition)
    seconds["read_write"] = time.monotonic() - started
    paths = list(written.paths)
    digest, files = _read_back(table, paths, [partition] * len(paths), None, seconds)
    for empty in [f for f in files if int(f.record_count) == 0]:
        delete_file(table.location(), str(empty.file_path), table.io)
    kept = [f for f in files if int(f.record_count) > 0]
    if not kept:
        delete_tree(table.location(), directory, table.io)
    lineage_in = lineage_out = None
    if written.lineage_kept is not None:  # a v3 table: the rows' lineage read back too (by field id)

        found = parquet_digest(with_lineage(table.schema()), [str(f.file_path) for f in kept], table.io)
        lineage_in = (written.lineage_kept.rows, written.lineage_kept.checksum)
        lineage_out = (found.rows, found.checksum)
    return GroupWritten(tuple(str(f.file_path) for f in kept), tuple(partition for _ in kept), tuple(kept),
                        written.rows_read, written.digest_kept.checksum, digest.rows, digest.checksum,
                        rows_deleted=written.rows_deleted, seconds=seconds, lineage_in=lineage_in,
                        lineage_out=lineage_out)


def warm(table: Table | None, *, attempt: int = 0) -> tuple[int, str]:
    """Load the digest's compiled kernels (numba: from its cache on disk, else compiled) in this executor's
    Python worker (``table`` is unused); unpickling this function imported this module, and with it what
    the tasks use. A reused worker pays that once; held a moment so that the tasks of a warm-up job land on
    distinct workers. Returns the worker's pid and the Arrow memory pool it allocates from
    (spark_actors/server.MEMORY_POOL_CONF)."""
    import datetime as dt
    import os

    import pyarrow as pa

    sample = pa.table({"i": pa.array([1, None], pa.int64()), "j": pa.array([1, 2], pa.int32()),
                       "f": [0.5, None], "s": ["a", None], "b": pa.array([b"x", b"y"]), "t": [True, False],
                       "d": [dt.date(2020, 1, 1), None],
                       "ts": pa.array([1, 2], pa.timestamp("us", tz="UTC"))})
    digest = DigestAccumulator()
    digest.add(sample)
    assert digest.digest.rows == 2
    time.sleep(1.0)
    return os.getpid(), str(pa.default_memory_pool().backend_name)


def calibrate(table: Table, inputs: list[DataFile], directory: str, codec: str, partition: tuple[int, Record],
              *, attempt: int = 0) -> tuple[int, int]:
    """(rows, bytes) of ``inputs`` written as one file under ``directory`` with the pyarrow path (removed
    afterwards): the output bytes per row a merge will write."""
    delete_tree(table.location(), directory, table.io)
    try:
        out = rewrite_group_arrow(table, inputs, directory, 1, codec, input_partition=partition)
        size = sum(len(table.io.new_input(p)) for p in out.paths)
    finally:
        delete_tree(table.location(), directory, table.io)
    return out.rows_in, size


def consolidate_batch(table: Table, spec_id: int, groups: list[list[str]], output_dir: str, rows_per_file: int,
                      codec: str, *, attempt: int = 0) -> tuple[Any, Any, dict[str, DataFile]]:
    """A buffered-write batch (autooptimize.arrow.consolidate.consolidate_files_arrow) on an executor: the
    writer's output, the outputs' digest read back by field id, and each output's DataFile (from its footer).
    The buffered files must be readable where the task runs (one host, or a shared buffer zone)."""
    from pyiceberg.typedef import Record

    _fresh_directory(table, output_dir, attempt)
    spec = table.metadata.specs()[spec_id]
    with writing(table, output_dir):
        out = consolidate_files_arrow(table, spec, groups, output_dir, rows_per_file, codec)
    written = [p for part in out.partitions for p in part.paths]
    digest = parquet_digest(table.schema(), written, table.io)
    files = {path: data_file_from_footer(table, path, spec_id, Record(*part.values))
             for part in out.partitions for path in part.paths}
    return out, digest, files

