"""The buffer zone: landing small Parquet files, per-table rules, status, and the watched folder.

Landing is cheap on purpose: it reads the file's footer (and only the partition source columns), checks
the schema by name against the table, copies or moves the file under the buffer root (never into the
table), and records it with one INSERT. A file that is not Parquet or does not fit the table's schema is
rejected with the reason and changes nothing. Consolidation (services/consolidate.py) commits batches.
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
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from autooptimize.config import Settings, parse_size
from autooptimize.domain.buffer_rules import BufferLevel, BufferRules, Decision, evaluate
from autooptimize.errors import ConfigError, InvalidArgument
from autooptimize.iceberg.catalog import load_table, parse_identifier
from autooptimize.storage.buffer_models import BufferBatch, BufferFile, BufferTable, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit

log = logging.getLogger(__name__)
TABLE_CACHE_SECONDS = 10.0
QUARANTINE_DIR = ".quarantine"


class Rejected(Exception):
    """A landed file does not fit (internal: land() reports it, never raises it)."""


@dataclass(frozen=True)
class _TableInfo:
    identifier: str
    buffer_table_id: int
    schema: Schema
    spec: PartitionSpec
    loaded: float


_cache: dict[tuple[int, str, str], _TableInfo] = {}
_cache_lock = threading.Lock()


def _table_info(settings: Settings, identifier: str) -> _TableInfo:
    key = (os.getpid(), settings.database_url, identifier)
    with _cache_lock:
        info = _cache.get(key)
    if info is not None and time.monotonic() - info.loaded < TABLE_CACHE_SECONDS:
        return info
    table = load_table(settings, identifier)
    from spark_actors.consolidate import check_supported_spec

    check_supported_spec(table.spec(), table.schema())
    _check_supported_schema(identifier, table.schema())
    table_id = ensure_buffer_table(settings, identifier)
    info = _TableInfo(identifier, table_id, table.schema(), table.spec(), time.monotonic())
    with _cache_lock:
        _cache[key] = info
    return info


def _check_supported_schema(identifier: str, schema: Schema) -> None:
    from autooptimize.errors import ActionRefused
    from spark_actors.schema import spark_schema

    try:
        spark_schema(schema)
    except ActionRefused as exc:
        raise InvalidArgument(f"table {identifier} cannot take buffered writes: {exc}") from None
    except ImportError:  # pragma: no cover - pyspark is a dependency
        pass


def ensure_buffer_table(settings: Settings, identifier: str) -> int:
    """The buffer-table id of ``identifier``, creating its row (default rules) if needed."""
    with session_scope(settings) as session:
        session.execute(insert(BufferTable).values(catalog=settings.catalog, identifier=identifier)
                        .on_conflict_do_nothing(index_elements=["catalog", "identifier"]))
        return int(session.scalars(select(BufferTable.id).where(
            BufferTable.catalog == settings.catalog, BufferTable.identifier == identifier)).one())


def _buffer_table(session: Session, settings: Settings, identifier: str) -> BufferTable | None:
    return session.scalars(select(BufferTable).where(
        BufferTable.catalog == settings.catalog, BufferTable.identifier == identifier)).one_or_none()


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
    """Rows, bytes, schema fingerprint and partition paths of a file, or Rejected with the reason."""
    try:
        metadata = pq.read_metadata(path)
        arrow = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as exc:
        raise Rejected(f"not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
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
        raise Rejected("schema does not match the table: " + "; ".join(problems))
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
                raise Rejected(f"required column {name!r} holds {chunk.statistics.null_count} null(s)")


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
    return settings.buffer_dir / identifier


def land(settings: Settings, identifier: str, files: Sequence[str | Path], *, move: bool = False,
         notify: bool = True) -> dict[str, Any]:
    """Land ``files`` for ``identifier``: each valid one is copied (or moved) into the buffer zone and
    recorded; each invalid one is listed under ``rejected`` with its reason and left untouched.

    Raises InvalidArgument/TableNotFound when the table or the file list itself is wrong (nothing landed).
    """
    parse_identifier(identifier)
    if isinstance(files, str | Path) or not files:
        raise InvalidArgument("files must be a non-empty list of Parquet file paths")
    info = _table_info(settings, identifier)
    zone = _zone(settings, identifier)
    landed: list[dict[str, Any]] = []
    rejected: list[dict[str, str]] = []
    staged: list[tuple[Path, dict[str, Any], str]] = []
    for item in files:
        source = Path(item).expanduser()
        try:
            if not source.is_file():
                raise Rejected("no such file")
            meta = check_file(source, info.schema, info.spec)
        except Rejected as exc:
            rejected.append({"file": str(source), "reason": str(exc)})
            continue
        target = _place(zone, source, move)
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
        decision = _after_landing(settings, identifier, info.buffer_table_id)
    return {"table": identifier, "landed": landed, "rejected": rejected,
            "fires": decision.rule if decision is not None and decision.fire else None}


def _place(zone: Path, source: Path, move: bool) -> Path:
    """Copy or move ``source`` into the zone: written under a temporary name, then renamed."""
    bucket = zone / datetime.now(UTC).strftime("%Y%m%d%H")
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


def _after_landing(settings: Settings, identifier: str, table_id: int) -> Decision:
    """Evaluate the table's rules; when one fires, ask for a consolidation (once per table at a time)."""
    with session_scope(settings) as session:
        row = session.get(BufferTable, table_id)
        assert row is not None
        decision = evaluate(rules_of(settings, row), buffer_level(session, table_id))
    if decision.fire:
        request_consolidation(settings, identifier)
    return decision


def request_consolidation(settings: Settings, identifier: str) -> bool:
    """Queue a consolidation of ``identifier`` unless one is queued already; False when Redis is down
    (landing keeps working: beat's tick asks again)."""
    from autooptimize.errors import ServiceUnavailable

    try:
        from tasks.dispatch import send_consolidation

        return send_consolidation(settings, identifier)
    except ServiceUnavailable as exc:
        log.warning("cannot queue a consolidation of %s now: %s", identifier, exc)
        return False


ORPHAN_AGE_SECONDS = 600


def sweep_orphans(settings: Settings, identifier: str, *, min_age: float = ORPHAN_AGE_SECONDS) -> dict[str, int]:
    """Files in ``identifier``'s zone that no row records (the lander died between placing and recording),
    older than ``min_age``: a moved file is landed again (its producer no longer has it), a copy or a
    temporary file is deleted (its producer still has the original and was told the landing failed)."""
    zone = _zone(settings, identifier)
    if not zone.is_dir():
        return {"adopted": 0, "deleted": 0}
    cutoff = time.time() - min_age
    candidates = [p for p in zone.glob("*/*") if p.is_file() and p.parent.name != QUARANTINE_DIR
                  and p.stat().st_mtime < cutoff]
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
                path.unlink(missing_ok=True)  # landed again under a new name
                adopted += 1
            else:
                _quarantine_dropped(path, result["rejected"][0]["reason"])
            continue
        path.unlink(missing_ok=True)
        deleted += 1
    if adopted or deleted:
        with session_scope(settings) as session:
            audit(session, "buffer.orphans_swept", table=identifier, adopted=adopted, deleted=deleted)
    return {"adopted": adopted, "deleted": deleted}


# --- rules and status ----------------------------------------------------------------------------

def rules_of(settings: Settings, row: BufferTable) -> BufferRules:
    return BufferRules(
        max_age_seconds=row.max_age_seconds or settings.buffer_max_age_seconds,
        min_bytes=row.min_bytes if row.min_bytes is not None else settings.buffer_min_bytes,
        max_bytes=row.max_bytes or settings.buffer_max_bytes,
        max_files=row.max_files or settings.buffer_max_files,
        combinable=row.combinable,
    )


def buffer_level(session: Session, table_id: int) -> BufferLevel:
    files, size, oldest = session.execute(
        select(func.count(), func.coalesce(func.sum(BufferFile.bytes), 0), func.min(BufferFile.arrived_at))
        .where(BufferFile.buffer_table_id == table_id, BufferFile.state == FileState.BUFFERED.value)
    ).one()
    age = None if oldest is None else max(0.0, (_db_now(session) - oldest).total_seconds())
    return BufferLevel(int(files), int(size), age)


def _db_now(session: Session) -> datetime:
    return session.execute(select(func.now())).scalar_one()


def _duration(value: Any, name: str) -> int:
    """Seconds from ``900``, ``90s``, ``15m``, ``2h`` or ``3d``."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        text = str(value).strip().lower()
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
        try:
            seconds = int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
        except (ValueError, KeyError):
            raise InvalidArgument(f"{name} {value!r} is not a duration; use seconds or e.g. 90s, 15m, 2h, 3d") from None
    if seconds <= 0:
        raise InvalidArgument(f"{name} must be positive (got {value!r})")
    return seconds


def set_rules(settings: Settings, identifier: str, *, max_age: Any = None, min_bytes: Any = None,
              max_bytes: Any = None, max_files: Any = None, combinable: bool | None = None,
              callback_url: str | None = None, reset: bool = False) -> dict[str, Any]:
    """Set a table's rules (None leaves a rule as it is; ``reset`` returns all to the defaults).
    Everything is validated before anything is written."""
    parse_identifier(identifier)
    load_table(settings, identifier)
    changes: dict[str, Any] = {}
    try:
        if max_age is not None:
            changes["max_age_seconds"] = _duration(max_age, "max-age")
        if min_bytes is not None:
            changes["min_bytes"] = parse_size(min_bytes, "min-bytes")
        if max_bytes is not None:
            changes["max_bytes"] = parse_size(max_bytes, "max-bytes")
            if changes["max_bytes"] <= 0:
                raise InvalidArgument(f"max-bytes must be positive (got {max_bytes!r})")
        if max_files is not None:
            changes["max_files"] = int(max_files)
            if changes["max_files"] <= 0:
                raise InvalidArgument(f"max-files must be a positive integer (got {max_files!r})")
    except (ConfigError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None
    if callback_url is not None:
        if callback_url and not callback_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"callback {callback_url!r} must be an http:// or https:// URL (or '' to remove)")
        changes["callback_url"] = callback_url or None
    if combinable is not None:
        changes["combinable"] = bool(combinable)
    table_id = ensure_buffer_table(settings, identifier)
    with session_scope(settings) as session:
        row = session.get(BufferTable, table_id, with_for_update=True)
        assert row is not None
        if reset:
            for name in ("max_age_seconds", "min_bytes", "max_bytes", "max_files", "callback_url"):
                setattr(row, name, None)
            row.combinable = True
        for name, value in changes.items():
            setattr(row, name, value)
        try:
            rules = rules_of(settings, row)
        except ValueError as exc:
            raise InvalidArgument(f"rules of {identifier} are inconsistent: {exc}") from None
        audit(session, "buffer.rules_set", table=identifier, **changes, reset=reset)
        return _rules_view(row, rules)


def _rules_view(row: BufferTable, rules: BufferRules) -> dict[str, Any]:
    return {"table": row.identifier, "max_age_seconds": rules.max_age_seconds, "min_bytes": rules.min_bytes,
            "max_bytes": rules.max_bytes, "max_files": rules.max_files, "combinable": rules.combinable,
            "callback_url": _redacted(row.callback_url),
            "overrides": [n for n in ("max_age_seconds", "min_bytes", "max_bytes", "max_files")
                          if getattr(row, n) is not None]}


def _redacted(url: str | None) -> str | None:
    from autooptimize.config import redact_url

    return redact_url(url) if url else None


def status(settings: Settings, identifier: str | None = None) -> list[dict[str, Any]]:
    """Per buffered table: files and bytes waiting, oldest age, batches in flight, which rule fires next."""
    if identifier is not None:
        parse_identifier(identifier)
    with session_scope(settings) as session:
        stmt = select(BufferTable).where(BufferTable.catalog == settings.catalog).order_by(BufferTable.identifier)
        if identifier is not None:
            stmt = stmt.where(BufferTable.identifier == identifier)
        rows = list(session.scalars(stmt))
        if identifier is not None and not rows:
            load_table(settings, identifier)  # a missing table says so
        out = []
        for row in rows:
            rules = rules_of(settings, row)
            level = buffer_level(session, row.id)
            decision = evaluate(rules, level)
            counts = dict(session.execute(
                select(BufferFile.state, func.count()).where(BufferFile.buffer_table_id == row.id)
                .group_by(BufferFile.state)).all())
            in_flight = session.scalar(select(func.count()).select_from(BufferBatch).where(
                BufferBatch.buffer_table_id == row.id, BufferBatch.state.in_(("claimed", "written", "committed"))))
            last = session.scalars(select(BufferBatch).where(
                BufferBatch.buffer_table_id == row.id, BufferBatch.committed_at.is_not(None))
                .order_by(BufferBatch.committed_at.desc()).limit(1)).one_or_none()
            out.append({
                "table": row.identifier,
                "buffered_files": level.files,
                "buffered_bytes": level.bytes,
                "oldest_age_seconds": None if level.oldest_age_seconds is None else round(level.oldest_age_seconds, 1),
                "in_batches": int(counts.get(FileState.CLAIMED.value, 0)),
                "quarantined": int(counts.get(FileState.QUARANTINED.value, 0)),
                "batches_in_flight": int(in_flight or 0),
                "fires_now": decision.rule,
                "next_rule": decision.next_rule,
                "seconds_to_max_age": None if decision.seconds_to_next is None else round(decision.seconds_to_next, 1),
                "last_commit": None if last is None else {
                    "batch": last.id, "snapshot_id": last.committed_snapshot_id, "files": last.files,
                    "at": last.committed_at.isoformat() if last.committed_at else None},
                "rules": _rules_view(row, rules),
            })
        return out


# --- watched folder ------------------------------------------------------------------------------

def poll_watch(settings: Settings, root: Path | None = None) -> dict[str, Any]:
    """Land every settled ``*.parquet`` under ``<root>/<namespace.table>/`` (moved, not copied).

    A file is settled when unmodified for AO_BUFFER_SETTLE_SECONDS; names starting with '.' or '_' are
    being written (write-then-rename) and are skipped. A rejected file goes to ``.quarantine/`` beside a
    ``<name>.reason`` file. A directory that names no valid table is reported and left alone.
    """
    root = root or settings.buffer_watch_root
    if root is None:
        return {"landed": 0, "rejected": 0, "errors": {}}
    root = Path(root).expanduser()
    now = time.time()
    landed = rejected = 0
    errors: dict[str, str] = {}
    if not root.is_dir():
        return {"landed": 0, "rejected": 0, "errors": {str(root): "watch root does not exist"}}
    for table_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        ready = [
            p for p in sorted(table_dir.iterdir())
            if p.is_file() and p.suffix == ".parquet" and not p.name.startswith((".", "_"))
            and now - p.stat().st_mtime >= settings.buffer_settle_seconds
        ]
        if not ready:
            continue
        try:
            result = land(settings, table_dir.name, ready, move=True)
        except Exception as exc:  # a wrong table name must not stop the other tables
            errors[table_dir.name] = str(exc)
            continue
        landed += len(result["landed"])
        for item in result["rejected"]:
            _quarantine_dropped(Path(item["file"]), item["reason"])
            rejected += 1
    return {"landed": landed, "rejected": rejected, "errors": errors}


def _quarantine_dropped(path: Path, reason: str) -> None:
    target_dir = path.parent / QUARANTINE_DIR
    target_dir.mkdir(exist_ok=True)
    target = target_dir / path.name
    if path.exists():
        os.replace(path, target)
    (target_dir / f"{path.name}.reason").write_text(reason + "\n")
