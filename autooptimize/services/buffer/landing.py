"""Landing small Parquet files into a table's buffer zone, and adopting files a dead lander left behind.

Landing is cheap on purpose: it reads the file's footer (and only the partition source columns), checks
the schema by name against the table, copies or moves the file under the buffer root (never into the
table), and records it with one INSERT. A file that is not Parquet or does not fit the table's schema is
rejected with the reason and changes nothing. Nothing is written or deleted outside the buffer root, judged
on resolved paths (autooptimize.iceberg.paths). Consolidation (services/buffer/consolidate.py) commits batches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from autooptimize.config import Settings
from autooptimize.domain.buffer_rules import FlushDecision, evaluate
from autooptimize.errors import ActionRefused, FileRejected, InvalidArgument, ServiceUnavailable
from autooptimize.iceberg import paths
from autooptimize.iceberg.catalog import load_table, parse_identifier
from autooptimize.services.buffer.rules import buffer_level, ensure_buffer_table, rules_of
from autooptimize.services.ports import Dispatch
from autooptimize.services.refusals import record_refusals
from autooptimize.storage.buffer_models import BufferFile, BufferTable, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit
from spark_actors.consolidate import check_supported_spec
from spark_actors.schema import spark_schema

log = logging.getLogger(__name__)
TABLE_CACHE_SECONDS = 10.0
QUARANTINE_DIR = ".quarantine"
ORPHAN_AGE_SECONDS = 600


@dataclass(frozen=True)
class TableInfo:
    """What landing needs of a table, cached for TABLE_CACHE_SECONDS per process."""

    identifier: str
    buffer_table_id: int
    schema: Schema
    spec: PartitionSpec
    loaded: float


_cache: dict[tuple[int, str, str], TableInfo] = {}
_cache_lock = threading.Lock()


def table_info(settings: Settings, identifier: str) -> TableInfo:
    """The table's schema, spec and buffer-table id; raises when the table cannot take buffered writes."""
    key = (os.getpid(), settings.database_url, identifier)
    with _cache_lock:
        info = _cache.get(key)
    if info is not None and time.monotonic() - info.loaded < TABLE_CACHE_SECONDS:
        return info
    table = load_table(settings, identifier)

    check_supported_spec(table.spec(), table.schema())
    _check_supported_schema(identifier, table.schema())
    table_id = ensure_buffer_table(settings, identifier)
    info = TableInfo(identifier, table_id, table.schema(), table.spec(), time.monotonic())
    with _cache_lock:
        _cache[key] = info
    return info


def _check_supported_schema(identifier: str, schema: Schema) -> None:
    try:
        spark_schema(schema)
    except ActionRefused as exc:
        raise InvalidArgument(f"table {identifier} cannot take buffered writes: {exc}") from None
    except ImportError:  # pragma: no cover - pyspark is a dependency
        pass


# --- schema and partition checks -----------------------------------------------------------------

_INT_RANK = {pa.int8(): 1, pa.int16(): 2, pa.int32(): 3, pa.int64(): 4,
             pa.uint8(): 2, pa.uint16(): 3, pa.uint32(): 4}


def _compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether Spark's cast from ``src`` to ``dst`` keeps every value (no narrowing, no re-parsing)."""
    if src.equals(dst):
        return True
    if pa.types.is_dictionary(src):
        return _compatible(src.value_type, dst)
    if pa.types.is_integer(dst) and src in _INT_RANK:
        return _INT_RANK[src] <= {pa.int32(): 3, pa.int64(): 4}.get(dst, 0)
    if pa.types.is_floating(dst) and pa.types.is_floating(src):
        return src.bit_width <= dst.bit_width
    if pa.types.is_string(dst) or pa.types.is_large_string(dst):
        return pa.types.is_string(src) or pa.types.is_large_string(src) or pa.types.is_string_view(src)
    if pa.types.is_binary(dst) or pa.types.is_large_binary(dst):
        return pa.types.is_binary(src) or pa.types.is_large_binary(src)
    if pa.types.is_timestamp(dst) and pa.types.is_timestamp(src):
        return src.unit in ("s", "ms", "us") and (src.tz is None) == (dst.tz is None)
    if pa.types.is_decimal(dst) and pa.types.is_decimal(src):
        return src.scale == dst.scale and src.precision <= dst.precision
    if pa.types.is_struct(dst) and pa.types.is_struct(src):
        names = {src.field(i).name: src.field(i).type for i in range(src.num_fields)}
        return all(dst.field(i).name not in names or _compatible(names[dst.field(i).name], dst.field(i).type)
                   for i in range(dst.num_fields)) and set(names) <= {dst.field(i).name for i in range(dst.num_fields)}
    return False


def check_file(path: Path, schema: Schema, spec: PartitionSpec) -> dict[str, Any]:
    """Rows, bytes, schema fingerprint and partition paths of a file, or FileRejected with the reason."""
    try:
        metadata = pq.read_metadata(path)
        arrow = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as exc:
        raise FileRejected(f"not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    expected = schema_to_pyarrow(schema, include_field_ids=False)
    valid = ", ".join(expected.names)
    problems = []
    for field in arrow:
        if field.name not in expected.names:
            problems.append(f"column {field.name!r} is not in the table (columns: {valid})")
        elif not _compatible(field.type, expected.field(field.name).type):
            problems.append(f"column {field.name!r} is {field.type}, which does not cast safely to the table's "
                            f"{expected.field(field.name).type}")
    for ice in schema.fields:
        if ice.required and ice.name not in arrow.names:
            problems.append(f"required column {ice.name!r} is missing")
    if problems:
        raise FileRejected("schema does not match the table: " + "; ".join(problems))
    _check_required_nulls(metadata, schema, arrow)
    partitions = _partitions(path, schema, spec, arrow, expected) if metadata.num_rows else []
    fingerprint = hashlib.sha256(str(arrow.remove_metadata()).encode()).hexdigest()
    return {"rows": metadata.num_rows, "bytes": path.stat().st_size, "partitions": partitions,
            "schema_fp": fingerprint}


def _check_required_nulls(metadata: Any, schema: Schema, arrow: pa.Schema) -> None:
    required = {f.name for f in schema.fields if f.required}
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for col in range(group.num_columns):
            chunk = group.column(col)
            name = chunk.path_in_schema
            if name in required and chunk.statistics is not None and chunk.statistics.has_null_count \
                    and chunk.statistics.null_count > 0:
                raise FileRejected(f"required column {name!r} holds {chunk.statistics.null_count} null(s)")


def _partitions(path: Path, schema: Schema, spec: PartitionSpec, arrow: pa.Schema,
                expected: pa.Schema) -> list[str]:
    """The partition paths the file's rows fall in, computed with the table's spec."""
    if not spec.fields:
        return [""]
    sources = sorted({schema.find_field(f.source_id).name for f in spec.fields})
    present = [s for s in sources if s in arrow.names]
    data = pq.read_table(path, columns=present) if present else pa.table({})
    columns = {}
    for pfield in spec.fields:
        source = schema.find_field(pfield.source_id)
        if source.name in present:
            values = data.column(source.name).cast(expected.field(source.name).type)
        else:
            values = pa.nulls(data.num_rows or pq.read_metadata(path).num_rows, expected.field(source.name).type)
        if not isinstance(pfield.transform, IdentityTransform):
            values = pfield.transform.pyarrow_transform(source.field_type)(values)
        columns[pfield.name] = values
    distinct = pa.table(columns).group_by(list(columns)).aggregate([]).to_pylist()
    paths = []
    for row in distinct:
        record = Record(*[
            partition_record_value(f, row[f.name], schema) if isinstance(f.transform, IdentityTransform)
            else row[f.name] for f in spec.fields
        ])
        paths.append(spec.partition_to_path(record, schema))
    return sorted(paths)


# --- landing -------------------------------------------------------------------------------------

def _zone(settings: Settings, identifier: str) -> Path:
    """The table's zone; PathRefused (recorded) when it resolves outside the buffer root."""
    zone = settings.buffer_dir / identifier
    _inside_buffer(settings, identifier, zone, "write")
    return zone


def _inside_buffer(settings: Settings, identifier: str, path: Path, operation: str) -> None:
    """PathRefused, recorded as ``path.refused``, unless ``path`` resolves inside the buffer root."""
    problem = paths.refusal(str(settings.buffer_dir), str(path), operation)
    if problem is not None:
        record_refusals(settings, [problem], table=identifier)
        raise problem


def land(settings: Settings, identifier: str, files: Sequence[str | Path], *, move: bool = False,
         notify: bool = True, dispatch: Dispatch | None = None) -> dict[str, Any]:
    """Land ``files`` for ``identifier``: each valid one is copied (or moved) into the buffer zone and
    recorded; each invalid one is listed under ``rejected`` with its reason and left untouched.

    With ``notify`` the table's rules are evaluated (``fires`` names the rule that fires); when one fires
    and a ``dispatch`` is given, a consolidation is asked of it (once per table at a time).

    Raises InvalidArgument/TableNotFound when the table or the file list itself is wrong (nothing landed).
    """
    parse_identifier(identifier)
    if isinstance(files, str | Path) or not files:
        raise InvalidArgument("files must be a non-empty list of Parquet file paths")
    info = table_info(settings, identifier)
    zone = _zone(settings, identifier)
    landed: list[dict[str, Any]] = []
    rejected: list[dict[str, str]] = []
    staged: list[tuple[Path, dict[str, Any], str]] = []
    for item in files:
        source = Path(item).expanduser()
        try:
            if not source.is_file():
                raise FileRejected("no such file")
            meta = check_file(source, info.schema, info.spec)
        except FileRejected as exc:
            rejected.append({"file": str(source), "reason": str(exc)})
            continue
        target = _place(settings, identifier, zone, source, move)
        staged.append((target, meta, str(source)))
    if staged:
        try:
            with session_scope(settings) as session:
                session.execute(insert(BufferFile), [
                    {"buffer_table_id": info.buffer_table_id, "path": str(target), "source": src,
                     "partitions": meta["partitions"], "rows": meta["rows"], "bytes": meta["bytes"],
                     "schema_fp": meta["schema_fp"], "state": FileState.BUFFERED.value}
                    for target, meta, src in staged
                ])
        except BaseException:
            for target, _, src in staged:  # not recorded: give moved files back, drop copies
                if move:
                    shutil.move(str(target), src)
                else:
                    target.unlink(missing_ok=True)
            raise
        landed = [{"file": src, "path": str(target), **meta} for target, meta, src in staged]
    decision = None
    if landed and notify:
        # The files are recorded: from here on nothing may fail the call, or a producer that retries would
        # land them twice (found by the soak at a connection-kill fault). Beat's tick evaluates the rules
        # again, so a failure here only delays the consolidation.
        try:
            decision = _after_landing(settings, identifier, info.buffer_table_id, dispatch)
        except Exception as exc:
            log.warning("landed %d file(s) into %s; evaluating its rules failed, beat's tick will: %s",
                        len(landed), identifier, exc)
    return {"table": identifier, "landed": landed, "rejected": rejected,
            "fires": decision.rule if decision is not None and decision.fire else None}


def _place(settings: Settings, identifier: str, zone: Path, source: Path, move: bool) -> Path:
    """Copy or move ``source`` into the zone: written under a temporary name, then renamed."""
    bucket = zone / datetime.now(UTC).strftime("%Y%m%d%H")
    _inside_buffer(settings, identifier, bucket, "write")
    bucket.mkdir(parents=True, exist_ok=True)
    # "m-": the producer gave the file up (moved); "c-": the producer kept its own (copied). After a
    # crash between placing and recording, sweep_orphans adopts the first and deletes the second.
    name = f"{'m' if move else 'c'}-{uuid.uuid4().hex}.parquet"
    target = bucket / name
    if move:
        try:
            os.replace(source, target)
            return target
        except OSError:  # another file system: copy, then remove the source once the copy is durable
            pass
    temp = bucket / f".{name}.tmp"
    shutil.copyfile(source, temp)
    os.replace(temp, target)
    if move:
        source.unlink()
    return target


def _after_landing(settings: Settings, identifier: str, table_id: int, dispatch: Dispatch | None) -> FlushDecision:
    """Evaluate the table's rules; when one fires, ask for a consolidation (once per table at a time)."""
    with session_scope(settings) as session:
        row = session.get(BufferTable, table_id)
        assert row is not None
        decision = evaluate(rules_of(settings, row), buffer_level(session, table_id))
    if decision.fire and dispatch is not None:
        request_consolidation(dispatch, identifier)
    return decision


def request_consolidation(dispatch: Dispatch, identifier: str) -> bool:
    """Queue a consolidation of ``identifier`` unless one is queued already; False when Redis is down
    (landing keeps working: beat's tick asks again)."""
    try:
        return dispatch.consolidation(identifier)
    except ServiceUnavailable as exc:
        log.warning("cannot queue a consolidation of %s now: %s", identifier, exc)
        return False


def sweep_orphans(settings: Settings, identifier: str, *, min_age: float = ORPHAN_AGE_SECONDS) -> dict[str, int]:
    """Files in ``identifier``'s zone that no row records (the lander died between placing and recording),
    older than ``min_age``: a moved file is landed again (its producer no longer has it), a copy or a
    temporary file is deleted (its producer still has the original and was told the landing failed)."""
    zone = _zone(settings, identifier)
    if not zone.is_dir():
        return {"adopted": 0, "deleted": 0}
    cutoff = time.time() - min_age
    root = str(settings.buffer_dir)
    # files of the zone's buckets (<zone>/<bucket>/<file>); links are neither followed nor touched
    candidates = [Path(paths.local_path(e.uri)) for e in paths.walk(root, str(zone))
                  if e.kind == "file" and e.mtime is not None and e.mtime < cutoff]
    candidates = [p for p in candidates if p.parent.parent == zone and p.parent.name != QUARANTINE_DIR]
    if not candidates:
        return {"adopted": 0, "deleted": 0}
    with session_scope(settings) as session:
        known = set(session.scalars(select(BufferFile.path).where(BufferFile.path.in_([str(p) for p in candidates]))))
    adopted = deleted = 0
    for path in candidates:
        if str(path) in known:
            continue
        if path.name.startswith("m-") and path.suffix == ".parquet":
            result = land(settings, identifier, [path], move=True, notify=False)
            if result["landed"]:
                paths.delete_file(root, str(path))  # landed again under a new name
                adopted += 1
            else:
                quarantine_dropped(path, result["rejected"][0]["reason"])
            continue
        paths.delete_file(root, str(path))
        deleted += 1
    if adopted or deleted:
        with session_scope(settings) as session:
            audit(session, "buffer.orphans_swept", table=identifier, adopted=adopted, deleted=deleted)
    return {"adopted": adopted, "deleted": deleted}


def quarantine_dropped(path: Path, reason: str) -> None:
    """Move a dropped file into ``.quarantine/`` beside it, with its reason; PathRefused when that
    directory leads elsewhere (a link)."""
    target_dir = path.parent / QUARANTINE_DIR
    paths.check(str(path.parent), str(target_dir), "write")
    target_dir.mkdir(exist_ok=True)
    target = target_dir / path.name
    if path.exists():
        os.replace(path, target)
    (target_dir / f"{path.name}.reason").write_text(reason + "\n")
