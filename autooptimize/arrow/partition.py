"""A respec output's partition check: every row of the file maps to the partition it is recorded under
(read back as pyiceberg reads it, the partition computed with pyiceberg's transforms)."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.arrow.rewrite import scan
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.internals import nested_column


def _plain_data_file(table: Table, path: str, partition: tuple[int, Record]) -> DataFile:
    """Just enough of a DataFile for ArrowScan to read a file back (no statistics)."""
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition[1],
        record_count=0, file_size_in_bytes=len(table.io.new_input(path)),
    )
    data_file.spec_id = partition[0]
    return data_file



def read_back(table: Table, paths: list[str], partitions: list[tuple[int, Record]]) -> pa.Table:
    """Output files (with the partition each is recorded under) as pyiceberg reads them."""
    batches = list(scan(table, [_plain_data_file(table, p, q) for p, q in zip(paths, partitions, strict=True)]))
    return pa.Table.from_batches(batches) if batches else schema_to_pyarrow(table.schema()).empty_table()


def check_partition(table: Table, spec: PartitionSpec, path: str, partition: tuple[int, Record]) -> None:
    """Raise VerificationFailed unless every row of the output at ``path`` maps to ``record`` under ``spec``."""
    import pyarrow.compute as pc

    record = partition[1]
    data = read_back(table, [path], [partition])
    schema = table.schema()
    for pos, pfield in enumerate(spec.fields):
        source = schema.find_field(pfield.source_id)
        column = nested_column(data, schema.find_column_name(pfield.source_id))
        values = pfield.transform.pyarrow_transform(source.field_type)(column)
        distinct = pc.unique(values).to_pylist()
        if distinct != [record[pos]]:
            raise VerificationFailed(
                f"output {path} holds {pfield.name} values {distinct[:5]} but is recorded under {record[pos]!r}"
            )
