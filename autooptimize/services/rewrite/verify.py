"""The verify ladder every rewritten group passes before it may be checkpointed or committed.

Digests are passed as values (rows + checksum string), so any checksum kind slots in: the Spark
content digest, the pyarrow one, or a later one, as long as input and output use the same kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autooptimize.domain.actions import Digest, Hooks
from autooptimize.errors import VerificationFailed


def verify_group(where: str, *, reader: str, files_in: int, metadata_rows: int, rows_read: int,
                 expected_out: Digest, digest_out: Digest, footer_rows: Callable[[], int],
                 rows_deleted: int | None = None, after_read: Callable[[], None] | None = None) -> None:
    """Raise VerificationFailed unless, in this order:

    1. ``rows_read`` (what ``reader`` read from the ``files_in`` inputs) == ``metadata_rows``;
    2. ``after_read()`` (a kind's own check, e.g. the rows the deletes remove) passes;
    3. ``digest_out`` (read back from the written files) == ``expected_out`` (the digest of the rows that
       should be written, observed in the same pass as the read) and, with deletes,
       ``rows_read − rows_deleted`` == ``digest_out.rows``;
    4. ``footer_rows()`` (row counts in the outputs' Parquet footers) == ``digest_out.rows``.
    """
    if rows_read != metadata_rows:
        raise VerificationFailed(
            f"{reader} read {rows_read} rows from {files_in} inputs but their metadata says {metadata_rows}"
        )
    if after_read is not None:
        after_read()
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


def observed_digest(hooks: Hooks, paths: list[str], written: Digest, read_back: Callable[[], Digest]) -> Digest:
    """The digest to verify the outputs with: the writer's own, or, when an ``after_write`` hook may have
    touched the files, one read back from them after the hook ran."""
    if hooks.after_write:
        hooks.after_write(list(paths))
        return read_back()
    return written


def as_digest(content: Any) -> Digest:
    """A writer's digest object (anything with ``rows`` and ``checksum``) as a value."""
    return Digest(int(content.rows), str(content.checksum))
