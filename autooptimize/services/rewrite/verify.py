"""The verify ladder every rewritten group passes before it may be checkpointed or committed.

Digests are passed as values (rows + checksum string) of the one content digest
(autooptimize/engines/digest.py), which Spark and pyarrow compute alike. The writer measures what it
read; the outputs are always read back by another reader, plain pyarrow taking every column by its
Parquet field id (:func:`output_digest`), and where no delete is applied the inputs are read that way
too. A reader that maps a column to the wrong field (by name after a rename, by position) then
disagrees with pyarrow instead of agreeing with itself on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyiceberg.table import Table

from autooptimize.domain.actions import Digest, Hooks
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.checksum import parquet_digest


def verify_group(where: str, *, reader: str, files_in: int, metadata_rows: int, rows_read: int,
                 expected_out: Digest, digest_out: Digest, footer_rows: Callable[[], int],
                 rows_deleted: int | None = None, after_read: Callable[[], None] | None = None,
                 inputs_by_id: Digest | None = None) -> None:
    """Raise VerificationFailed unless, in this order:

    1. ``rows_read`` (what ``reader`` read from the ``files_in`` inputs) == ``metadata_rows``;
    2. ``after_read()`` (a kind's own check, e.g. the rows the deletes remove) passes;
    3. ``inputs_by_id`` (when given: the inputs read by field id with plain pyarrow) == ``expected_out``
       (the digest of the rows ``reader`` read and should write, observed in the same pass as the read);
    4. ``digest_out`` (the written files read back by field id, :func:`output_digest`) == ``expected_out``
       and, with deletes, ``rows_read − rows_deleted`` == ``digest_out.rows``;
    5. ``footer_rows()`` (row counts in the outputs' Parquet footers) == ``digest_out.rows``.
    """
    if rows_read != metadata_rows:
        raise VerificationFailed(
            f"{reader} read {rows_read} rows from {files_in} inputs but their metadata says {metadata_rows}"
        )
    if after_read is not None:
        after_read()
    if inputs_by_id is not None and inputs_by_id != expected_out:
        raise VerificationFailed(
            f"{reader} and pyarrow (by field id) read the inputs of {where} differently, a column mapped to "
            f"another field: rows {expected_out.rows} vs {inputs_by_id.rows}, checksum {expected_out.checksum} "
            f"vs {inputs_by_id.checksum}"
        )
    if rows_deleted is None:
        if digest_out != expected_out:
            raise VerificationFailed(
                f"output of {where} differs from its inputs: rows {expected_out.rows} → {digest_out.rows}, "
                f"checksum {expected_out.checksum} → {digest_out.checksum}"
            )
    elif digest_out != expected_out or rows_read - rows_deleted != digest_out.rows:
        raise VerificationFailed(
            f"output of {where} differs from its inputs with deletes applied: {rows_read} rows in − "
            f"{rows_deleted} deleted, {digest_out.rows} out; checksum {expected_out.checksum} → "
            f"{digest_out.checksum}"
        )
    footers = footer_rows()
    if footers != digest_out.rows:
        raise VerificationFailed(f"output footers of {where} hold {footers} rows, expected {digest_out.rows}")


def output_digest(table: Table, paths: list[str]) -> Digest:
    """The digest of written files read back by field id with plain pyarrow (not by the writer)."""
    return as_digest(parquet_digest(table.schema(), paths, table.io))


def inputs_digest(table: Table, paths: list[str]) -> Future[Digest]:
    """:func:`output_digest` of a group's inputs, read in the background while the group is rewritten."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ao-digest")
    try:
        return pool.submit(output_digest, table, paths)
    finally:
        pool.shutdown(wait=False)  # the thread ends with its one task


def read_back_digest(hooks: Hooks, paths: list[str], read_back: Callable[[], Digest]) -> Digest:
    """The outputs' digest read back by ``read_back``, after an ``after_write`` hook (tests touch the
    files there) has run."""
    if hooks.after_write:
        hooks.after_write(list(paths))
    return read_back()


def as_digest(content: Any) -> Digest:
    """A writer's digest object (anything with ``rows`` and ``checksum``) as a value."""
    return Digest(int(content.rows), str(content.checksum))
