"""Schema and partition evolution for the merge action.

* Files without Parquet field ids (``add_files`` under a name mapping) are planned in their own
  groups, never with files that carry ids: they are read by name, the others by id.
* Older-spec partitions merge only within their own (spec id, partition). With the action option
  ``respec=true`` every file of an older-spec partition is rewritten into the current spec instead:
  each row goes to the current-spec partition pyiceberg's transforms give it.
* A respec output's partition travels through the checkpoint as Iceberg's single-value binary
  serialisation (hex), so a resumed commit records exactly the partition the rewrite computed.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.domain.checks import bool_option
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, expected_outputs, output_sizes
from autooptimize.errors import InvalidArgument, VerificationFailed

NAME_MAPPING_PROPERTY = "schema.name-mapping.default"


def validate_merge_options(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The merge action's options: ``respec`` (bool, default false), ``partial_progress`` (bool, default
    false) and ``max_commits`` (int ≥ 1, default 10; see services/progress)."""
    from autooptimize.services.progress import PROGRESS_OPTIONS, validate_progress_options

    valid = ("respec", *PROGRESS_OPTIONS)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"merge does not know option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}")
    out: dict[str, Any] = validate_progress_options(options)
    if "respec" in options:
        out["respec"] = bool_option("respec", options["respec"])
    return out


def wants_respec(options: dict[str, Any] | None) -> bool:
    return bool((options or {}).get("respec"))


@functools.lru_cache(maxsize=65536)
def _has_field_ids_cached(path: str, io: Any) -> bool:
    with io.new_input(path).open() as stream:
        schema = pq.read_schema(stream)
    return all(f.metadata and b"PARQUET:field_id" in f.metadata for f in schema)


def has_field_ids(table: Table, path: str) -> bool:
    """True when every top-level column of the Parquet file carries a field id (files are immutable)."""
    return _has_field_ids_cached(path, table.io)


def may_hold_files_without_ids(table: Table) -> bool:
    """pyiceberg reads a file without field ids only through a name mapping: no mapping, no such file."""
    return NAME_MAPPING_PROPERTY in table.properties


def split_by_field_ids(table: Table, files: list[PlanFile]) -> tuple[list[PlanFile], list[PlanFile]]:
    """(files with field ids, files without); footers are read only when a name mapping exists."""
    if not may_hold_files_without_ids(table):
        return files, []
    with_ids, without = [], []
    for f in files:
        (with_ids if has_field_ids(table, f.path) else without).append(f)
    return with_ids, without


def combine_plans(files: list[PlanFile], plans: list[Plan], target: int, tolerance: int) -> Plan:
    """One plan of a partition from plans of disjoint subsets of its ``files``."""
    groups = tuple(g for p in plans for g in p.groups)
    replaced = {f.path for g in groups for f in g.files}
    kept = [f.size for f in files if f.path not in replaced]
    written = [s for g in groups for s in g.output_sizes()]
    before = EntropyStats.from_sizes([f.size for f in files], target)
    after = EntropyStats.from_sizes(kept + written, target)
    return Plan(target=target, tolerance=tolerance, groups=groups, mse_before=before.mse, mse_after=after.mse,
                files_before=len(files), files_after=len(kept) + len(written))


def plan_respec(files: list[PlanFile], target: int, tolerance: int) -> Plan:
    """Rewrite every file: consecutive runs of about ``target`` bytes, largest files first."""
    ordered = sorted(files, key=lambda f: (-f.size, f.path))
    groups: list[RewriteGroup] = []
    run: list[PlanFile] = []
    for f in ordered:
        run.append(f)
        if sum(x.size for x in run) >= target:
            groups.append(RewriteGroup(tuple(run), expected_outputs(sum(x.size for x in run), target)))
            run = []
    if run:
        groups.append(RewriteGroup(tuple(run), expected_outputs(sum(x.size for x in run), target)))
    before = EntropyStats.from_sizes([f.size for f in files], target)
    written = [s for g in groups for s in output_sizes(g.bytes_in, target)]
    after = EntropyStats.from_sizes(written, target)
    return Plan(target=target, tolerance=tolerance, groups=tuple(groups), mse_before=before.mse,
                mse_after=after.mse, files_before=len(files), files_after=len(written))


def encode_partition(spec: PartitionSpec, table: Table, record: Record) -> list[str | None]:
    """The partition record as hex of Iceberg's single-value serialisation (JSON-safe)."""
    partition_type = spec.partition_type(table.schema())
    return [None if record[i] is None else to_bytes(f.field_type, record[i]).hex()
            for i, f in enumerate(partition_type.fields)]


def decode_partition(spec: PartitionSpec, table: Table, encoded: list[str | None]) -> Record:
    partition_type = spec.partition_type(table.schema())
    if len(encoded) != len(partition_type.fields):
        raise InvalidArgument(f"partition {encoded!r} does not match spec {spec.spec_id}")
    return Record(*[None if v is None else from_bytes(f.field_type, bytes.fromhex(v))
                    for v, f in zip(encoded, partition_type.fields, strict=True)])


def evolution_rewrite(table: Table, pf: Any, inputs: list[str], directory: str, files_out: int, codec: str,
                      by_path: dict[str, Any], hooks: Any, respec: bool) -> dict[str, Any]:
    """Rewrite one group on the pyarrow path and verify it; returns the merge's checkpoint entry.

    Raises VerificationFailed unless rows and content checksum of the outputs (read back through
    pyiceberg) equal those of the inputs, the footers hold those rows, and every respec output holds
    only rows of the partition it is recorded under.
    """
    from autooptimize.iceberg.commit import data_file_from_footer
    from spark_actors.arrow_rewrite import digest_files, rewrite_group_arrow

    spec = table.spec() if respec else None
    result = rewrite_group_arrow(table, [by_path[p].data_file for p in inputs], directory, files_out, codec,
                                 spec=spec, input_partition=None if respec else (pf.spec_id, pf.record))
    rows_out, checksum_out = result.rows_out, result.checksum_out
    if hooks.after_write:
        hooks.after_write(list(result.paths))
        rows_out, checksum_out = digest_files(table, list(result.paths), list(result.partitions))
    metadata_rows = sum(by_path[p].record_count for p in inputs)
    if result.rows_in != metadata_rows:
        raise VerificationFailed(
            f"pyiceberg read {result.rows_in} rows from {len(inputs)} inputs but their metadata says {metadata_rows}"
        )
    if (rows_out, checksum_out) != (result.rows_in, result.checksum_in):
        raise VerificationFailed(
            f"output of {directory} differs from its inputs: rows {result.rows_in} → {rows_out}, "
            f"checksum {result.checksum_in} → {checksum_out}"
        )
    partitions = list(result.partitions)
    if respec:
        assert spec is not None
        for path, partition in zip(result.paths, partitions, strict=True):
            check_partition(table, spec, path, partition)
    outputs = [data_file_from_footer(table, p, sid, record) for p, (sid, record) in zip(result.paths, partitions,
                                                                                        strict=True)]
    footer_rows = sum(int(o.record_count) for o in outputs)
    if footer_rows != rows_out:
        raise VerificationFailed(f"output footers of {directory} hold {footer_rows} rows, expected {rows_out}")
    entry: dict[str, Any] = {
        "spec_id": pf.spec_id,
        "partition": pf.key,
        "inputs": inputs,
        "outputs": list(result.paths),
        "bytes_in": sum(by_path[p].size for p in inputs),
        "bytes_out": sum(int(o.file_size_in_bytes) for o in outputs),
        "rows_in": result.rows_in,
        "rows_out": rows_out,
        "checksum_in": result.checksum_in,
        "checksum_out": checksum_out,
        "output_sizes": [int(o.file_size_in_bytes) for o in outputs],
        "engine": "arrow",
    }
    if respec:
        assert spec is not None
        entry["output_partitions"] = [[sid, encode_partition(spec, table, record)] for sid, record in partitions]
    return entry


def check_partition(table: Table, spec: PartitionSpec, path: str, partition: tuple[int, Record]) -> None:
    """Raise VerificationFailed unless every row of the output at ``path`` maps to ``record`` under ``spec``."""
    import pyarrow.compute as pc
    from pyiceberg.io.pyarrow import _get_field_from_arrow_table

    from spark_actors.arrow_rewrite import read_back

    record = partition[1]
    data = read_back(table, [path], [partition])
    schema = table.schema()
    for pos, pfield in enumerate(spec.fields):
        source = schema.find_field(pfield.source_id)
        column = _get_field_from_arrow_table(data, schema.find_column_name(pfield.source_id))
        values = pfield.transform.pyarrow_transform(source.field_type)(column)
        distinct = pc.unique(values).to_pylist()
        if distinct != [record[pos]]:
            raise VerificationFailed(
                f"output {path} holds {pfield.name} values {distinct[:5]} but is recorded under {record[pos]!r}"
            )


def evolution_data_files(table: Table, entry: dict[str, Any]) -> list[Any]:
    """DataFiles of a respec entry, each with the spec and partition its rewrite recorded."""
    from autooptimize.iceberg.commit import data_file_from_footer

    specs = table.specs()
    files = []
    for path, (spec_id, encoded) in zip(entry["outputs"], entry["output_partitions"], strict=True):
        spec = specs[int(spec_id)]
        files.append(data_file_from_footer(table, path, spec.spec_id, decode_partition(spec, table, encoded)))
    return files
