"""A merge whose output cannot be written (the disk filled, a file size limit) fails with the file system's
own error. On 2026-12-01 a disk that filled mid-merge failed two actions as ``ArrowInvalid: Operation on
closed file``: closing the outputs as on success wrote what they held to a stream that had failed, and that
second error replaced the first (autooptimize/arrow/writers.Writers.__exit__)."""

from __future__ import annotations

import errno
import multiprocessing
import resource
import signal

import pyarrow as pa

from autooptimize.arrow.rewrite import rewrite_group_arrow
from tests.integration.tables import ARROW, DAY1, SCHEMA, SPEC

ROWS = 50_000
LIMIT = 300_000  # bytes: a file may grow to this, then a write fails with EFBIG


def _merge_under_a_size_limit(table, inputs, directory, out) -> None:  # type: ignore[no-untyped-def]
    """In a child process: the merge with every file it writes limited to LIMIT bytes."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    try:
        rewrite_group_arrow(table, inputs, directory, 1, "zstd", input_partition=(0, inputs[0].partition))
        out.put(("no error", None, ""))
    except BaseException as exc:  # noqa: BLE001 - reported to the test whole
        out.put((type(exc).__name__, getattr(exc, "errno", None), str(exc)))


def test_a_merge_that_cannot_write_its_output_fails_with_the_file_systems_error(catalog):
    # row groups of 20,000 rows: the merge writes several before one fails, and holds more when it does
    table = catalog.create_table(f"test.write_failure_{id(catalog)}", schema=SCHEMA, partition_spec=SPEC,
                                 properties={"write.parquet.row-group-limit": "20000"})
    for i in range(4):  # incompressible payloads: the output outgrows LIMIT
        first = i * ROWS
        table.append(pa.table({"id": list(range(first, first + ROWS)), "day": [DAY1] * ROWS,
                               "v": [f"{(k * 2654435761) % (1 << 64):016x}{k:08x}" for k in range(first, first + ROWS)],
                               "x": [k * 0.5 for k in range(first, first + ROWS)]}, schema=ARROW))
    inputs = [task.file for task in table.scan().plan_files()]
    assert len(inputs) == 4 and sum(f.file_size_in_bytes for f in inputs) > 2 * LIMIT
    directory = f"{table.location()}/data/ao-write-failure"
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_merge_under_a_size_limit, args=(table, inputs, directory, out))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    name, code, message = out.get(timeout=5)
    assert (name, code) == ("OSError", errno.EFBIG), (name, code, message)
    assert "File too large" in message and "closed file" not in message
