"""Schema and partition evolution for the merge action (its planning; the pyarrow rewrite path is
services/rewrite/evolution.py).

* Files without Parquet field ids (``add_files`` under a name mapping) are planned in their own
  groups, never with files that carry ids: they are read by name, the others by id.
* Older-spec partitions merge only within their own (spec id, partition). With the action option
  ``respec=true`` every file of an older-spec partition is rewritten into the current spec instead:
  each row goes to the current-spec partition pyiceberg's transforms give it.
* A respec output's partition travels through the checkpoint as Iceberg's single-value binary
  serialisation (hex), so a resumed commit records exactly the partition the rewrite computed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from autooptimize.domain.checks import bool_option
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, expected_outputs, output_sizes
from autooptimize.errors import InvalidArgument
from autooptimize.services.progress import PROGRESS_OPTIONS, validate_progress_options

NAME_MAPPING_PROPERTY = "schema.name-mapping.default"


def validate_merge_options(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The merge action's options: ``respec`` (bool, default false), ``partial_progress`` (bool, default
    false), ``max_commits`` (int ≥ 1, default 10; see services/progress) and ``engine`` (``spark``,
    ``spark_sql`` or ``local``: AO_REWRITE_ENGINE for this action, see services/rewrite/engine.py)."""
    valid = ("respec", "engine", *PROGRESS_OPTIONS)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidArgument(f"merge does not know option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}")
    out: dict[str, Any] = validate_progress_options(options)
    if "respec" in options:
        out["respec"] = bool_option("respec", options["respec"])
    if "engine" in options:
        out["engine"] = engine_option(options["engine"])
    return out


def validate_compact_options(table: Table, options: dict[str, Any]) -> dict[str, Any]:
    """The compact_deletes action's one option: ``engine`` (as for a merge)."""
    unknown = sorted(set(options) - {"engine"})
    if unknown:
        raise InvalidArgument(f"compact_deletes does not know option(s) {', '.join(unknown)}; valid options: engine")
    return {"engine": engine_option(options["engine"])} if "engine" in options else {}


ENGINES = ("spark", "spark_sql", "local")  # autooptimize.domain.actions.Engine


def engine_option(value: Any) -> str:
    """The ``engine`` option of a merge or sort (AO_REWRITE_ENGINE for one action)."""
    if value not in ENGINES:
        raise InvalidArgument(f"option engine must be one of {', '.join(ENGINES)}, got {value!r}")
    return str(value)


def wants_respec(options: dict[str, Any] | None) -> bool:
    return bool((options or {}).get("respec"))


#: footer answers by file path (files are immutable; the key holds no FileIO, so none is kept alive)
_FIELD_IDS: OrderedDict[str, bool] = OrderedDict()
_FIELD_IDS_MAX = 65536
_field_ids_lock = threading.Lock()


def has_field_ids(table: Table, path: str) -> bool:
    """True when every top-level column of the Parquet file carries a field id (files are immutable)."""
    with _field_ids_lock:
        known = _FIELD_IDS.get(path)
        if known is not None:
            _FIELD_IDS.move_to_end(path)
            return known
    with table.io.new_input(path).open() as stream:
        schema = pq.read_schema(stream)
    answer = all(f.metadata and b"PARQUET:field_id" in f.metadata for f in schema)
    with _field_ids_lock:
        _FIELD_IDS[path] = answer
        while len(_FIELD_IDS) > _FIELD_IDS_MAX:
            _FIELD_IDS.popitem(last=False)
    return answer


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
