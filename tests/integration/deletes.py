"""Real Iceberg v2 delete files for the tests, and a second reader that applies them independently.

Delete files are written as Parquet with the spec's field ids and committed in a delete manifest
(autooptimize.iceberg.deletes; pyiceberg 0.12 writes no delete files). The second reader uses neither
that module nor Spark: it lists live entries through pyiceberg's ``inspect.entries()``, reads files with
pyarrow and applies the spec's rules in plain Python, so it can disagree with the compaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow

from autooptimize.iceberg.checksum import arrow_checksum
from autooptimize.iceberg.deletes import (
    commit_delete_files,
    scope_of,
    write_equality_deletes,
    write_position_deletes,
)

DATA, POSITION, EQUALITY = 0, 1, 2


def data_files(table: Any, partition_fragment: str = "") -> list[str]:
    """Live data file paths (oldest first by sequence number) whose path contains the fragment."""
    table.refresh()
    rows = [r for r in table.inspect.entries().to_pylist() if r["status"] != 2 and r["data_file"]["content"] == DATA]
    rows.sort(key=lambda r: (r["sequence_number"], r["data_file"]["file_path"]))
    return [r["data_file"]["file_path"] for r in rows if partition_fragment in r["data_file"]["file_path"]]


def delete_files(table: Any) -> list[str]:
    table.refresh()
    return sorted(r["data_file"]["file_path"] for r in table.inspect.entries().to_pylist()
                  if r["status"] != 2 and r["data_file"]["content"] != DATA)


def delete_positions(table: Any, positions: dict[str, Iterable[int]], scope_path: str | None = None) -> str:
    """Commit one position delete file removing ``positions`` of each named data file.

    The delete file lives in the partition of ``scope_path`` (default: the first named file).
    """
    scope = scope_of(table, scope_path or next(iter(positions)))
    f = write_position_deletes(table, scope, [(p, i) for p, idx in positions.items() for i in idx])
    commit_delete_files(table, [f])
    return str(f.file_path)


def delete_equal(table: Any, scope_path: str, columns: list[str], rows: list[dict[str, Any]]) -> str:
    """Commit one equality delete file in the partition of the data file ``scope_path``."""
    f = write_equality_deletes(table, scope_of(table, scope_path), columns, rows)
    commit_delete_files(table, [f])
    return str(f.file_path)


def _read(table: Any, path: str) -> pa.Table:
    """A file read with plain pyarrow through the table's FileIO (local or an object store)."""
    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream)


def reference_read(table: Any) -> pa.Table:
    """The table's rows with every live delete file applied, by the spec's rules, without Spark."""
    table.refresh()
    entries = [r for r in table.inspect.entries().to_pylist() if r["status"] != 2]
    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    names = [f.name for f in table.schema().fields]
    pieces = []
    for data in (e for e in entries if e["data_file"]["content"] == DATA):
        df, seq = data["data_file"], data["sequence_number"]
        rows = _read(table, df["file_path"]).select(names).to_pylist()
        keep = [True] * len(rows)
        for d in (e for e in entries if e["data_file"]["content"] != DATA):
            dfile, dseq = d["data_file"], d["sequence_number"]
            if dfile["content"] == POSITION:
                if dfile["partition"] != df["partition"] or dseq < seq:
                    continue
                for row in _read(table, dfile["file_path"]).to_pylist():
                    if row["file_path"] == df["file_path"]:
                        keep[row["pos"]] = False
            else:
                if (dfile["partition"] and dfile["partition"] != df["partition"]) or dseq <= seq:
                    continue
                by_id = {f.field_id: f.name for f in table.schema().fields}
                cols = [by_id[i] for i in dfile["equality_ids"]]
                deleted = {tuple(r[c] for c in cols) for r in _read(table, dfile["file_path"]).to_pylist()}
                for i, row in enumerate(rows):
                    if tuple(row[c] for c in cols) in deleted:
                        keep[i] = False
        pieces.append(pa.Table.from_pylist([r for r, k in zip(rows, keep, strict=True) if k], schema=schema))
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def reference_checksum(table: Any) -> str:
    return arrow_checksum(reference_read(table))
