"""Row lineage on the pyarrow path (Iceberg v3): the ``_row_id`` and ``_last_updated_sequence_number`` of
every row of a data file, materialised, so a rewrite writes them into its outputs unchanged.

A row's value is the file's column when the file has it and the value is not null; otherwise its
``_row_id`` is the file's ``first_row_id`` plus its position (null when the file has no
``first_row_id``: it was written before the table was upgraded and no snapshot since assigned one) and
its ``_last_updated_sequence_number`` is the file's data sequence number (autooptimize.iceberg.v3).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile

from autooptimize.iceberg.v3 import LAST_UPDATED_FIELD_ID, ROW_ID_FIELD_ID, first_row_id, with_lineage

__all__ = ["lineage_columns", "with_lineage"]

FIELD_ID = b"PARQUET:field_id"


def lineage_columns(io: object, data_file: DataFile, sequence_number: int) -> tuple[pa.Array, pa.Array]:
    """(``_row_id``, ``_last_updated_sequence_number``) of every row of ``data_file``, in file order."""
    rows = int(data_file.record_count)
    with io.new_input(str(data_file.file_path)).open() as stream:  # type: ignore[attr-defined]
        parquet = pq.ParquetFile(stream)
        by_id = {int(f.metadata[FIELD_ID]): f.name for f in parquet.schema_arrow
                 if f.metadata and FIELD_ID in f.metadata}
        wanted = [by_id[i] for i in (ROW_ID_FIELD_ID, LAST_UPDATED_FIELD_ID) if i in by_id]
        stored = parquet.read(columns=wanted) if wanted else None
    if stored is not None and stored.num_rows != rows:
        raise ValueError(f"{data_file.file_path} holds {stored.num_rows} rows but its metadata says {rows}")

    def column(field_id: int, fallback: pa.Array) -> pa.Array:
        if stored is None or field_id not in by_id:
            return fallback
        return pc.coalesce(stored.column(by_id[field_id]).combine_chunks().cast(pa.int64()), fallback)

    first = first_row_id(data_file)
    inherited_ids = (pa.array(np.arange(first, first + rows, dtype=np.int64)) if first is not None
                     else pa.nulls(rows, pa.int64()))
    inherited_seq = pa.array(np.full(rows, sequence_number, dtype=np.int64))
    return column(ROW_ID_FIELD_ID, inherited_ids), column(LAST_UPDATED_FIELD_ID, inherited_seq)
