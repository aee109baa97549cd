"""The ``local`` engine's rewrite of one merge/sort/z-order/respec group (pyarrow in this process, for a
single machine without a Spark cluster), the partition check of a respec output, and the DataFiles of a
respec group."""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from autooptimize.arrow.partition import check_partition
from autooptimize.arrow.rewrite import rewrite_group_arrow
from autooptimize.domain.actions import Digest, Engine, GroupResult, Hooks
from autooptimize.domain.profile import phase
from autooptimize.iceberg.commit import data_file_from_footer
from autooptimize.iceberg.files import LiveFile, PartitionFiles
from autooptimize.services.evolution import decode_partition, encode_partition
from autooptimize.services.rewrite.kind import group_result
from autooptimize.services.rewrite.verify import output_digest, read_back_digest, verify_group


def local_rewrite(table: Table, pf: PartitionFiles, inputs: list[str], directory: str, files_out: int,
                  codec: str, by_path: dict[str, LiveFile], hooks: Hooks, respec: bool,
                  sort: list[Any] | None = None, sort_order_id: int | None = None,
                  check_sorted: Any = None, zorder: list[Any] | None = None) -> GroupResult:
    """Rewrite one group on the pyarrow path in this process and verify it here; returns the group's
    checkpoint record.

    Raises VerificationFailed unless rows and content checksum of the outputs (read back by field id
    with plain pyarrow) equal those of the inputs (read through pyiceberg, or directly when their columns are
    exactly the table's: autooptimize.arrow.rewrite.scan), the footers hold those rows,
    and every respec output holds only rows of the partition it is recorded under.
    """
    spec = table.spec() if respec else None
    with phase("group.read_write"):
        result = rewrite_group_arrow(table, [by_path[p].data_file for p in inputs], directory, files_out, codec,
                     spec=spec, input_partition=None if respec else (pf.spec_id, pf.record), sort=sort,
                     zorder=zorder)
    partitions = list(result.partitions)
    digest_in = Digest(result.rows_in, result.checksum_in)
    with phase("group.read_back"):
        digest_out = read_back_digest(hooks, list(result.paths), lambda: output_digest(table, list(result.paths)))
    outputs: list[Any] = []

    def footer_rows() -> int:
        if spec is not None:  # a respec: every output holds only rows of the partition it is recorded under
            for path, partition in zip(result.paths, partitions, strict=True):
                check_partition(table, spec, path, partition)
        with phase("group.footers"):
            outputs.extend(data_file_from_footer(table, p, sid, record, sort_order_id)
                           for p, (sid, record) in zip(result.paths, partitions, strict=True))
        return sum(int(o.record_count) for o in outputs)

    verify_group(directory, reader="pyiceberg", files_in=len(inputs),
                 metadata_rows=sum(by_path[p].record_count for p in inputs), rows_read=digest_in.rows,
                 expected_out=digest_in, digest_out=digest_out, footer_rows=footer_rows)
    if check_sorted is not None:  # a sort: the outputs hold disjoint ranges of the first sort column
        check_sorted(outputs)
    encoded = None if spec is None else tuple((int(sid), tuple(encode_partition(spec, table, record)))
                                              for sid, record in partitions)
    return group_result(pf, inputs, sum(by_path[p].size for p in inputs), list(result.paths), outputs,
                        digest_in.rows, digest_in.checksum, digest_out,
                        engine=Engine.LOCAL.value,
                        output_partitions=encoded, sort_order_id=sort_order_id)


def evolution_data_files(table: Table, group: GroupResult) -> list[Any]:
    """DataFiles of a respec group, each with the spec and partition its rewrite recorded."""
    specs = table.specs()
    files = []
    for path, (spec_id, encoded) in zip(group.outputs, group.output_partitions or (), strict=True):
        spec = specs[int(spec_id)]
        files.append(data_file_from_footer(table, path, spec.spec_id, decode_partition(spec, table, list(encoded))))
    return files
