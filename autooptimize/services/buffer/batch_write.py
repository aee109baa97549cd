"""Writing one batch: read its buffered files, cast them to the table's schema, write target-size files per
partition, and verify rows and content checksum (the output read back by field id with plain pyarrow);
unusable files are quarantined.

Under the default engine (``spark``) the batch is one task of a Spark job on an executor
(spark_actors/group_tasks.consolidate_batch: pyarrow, autooptimize/arrow/consolidate.py), which also reads the
outputs back and their footers; this process compares. Under ``spark_sql`` Spark's own reader and writer
write it (file:// only), under ``local`` pyarrow in this process; both are read back here."""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from sqlalchemy import select

from autooptimize.arrow.consolidate import consolidate_files_arrow
from autooptimize.config import Settings
from autooptimize.errors import FileRejected, Retry, ServiceUnavailable, VerificationFailed
from autooptimize.iceberg import paths
from autooptimize.iceberg.checksum import parquet_digest
from autooptimize.iceberg.commit import data_file_from_footer
from autooptimize.iceberg.fileio import table_is_local
from autooptimize.services.buffer.hooks import BufferHooks, call_hook
from autooptimize.services.buffer.landing import QUARANTINE_DIR, check_file
from autooptimize.services.refusals import record_refusals
from autooptimize.storage.buffer_models import BufferFile, FileState
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import audit
from spark_actors import group_tasks
from spark_actors.action_job import TableContext, run_action_job
from spark_actors.consolidate import consolidate_files

log = logging.getLogger(__name__)


def _claimed_files(settings: Settings, batch_id: str) -> list[BufferFile]:
    with session_scope(settings) as session:
        return list(session.scalars(select(BufferFile).where(
            BufferFile.batch_id == batch_id, BufferFile.state == FileState.CLAIMED.value).order_by(BufferFile.id)))


def write_verified(settings: Settings, spark: Any, table: Table, batch_id: str, identifier: str,
                    output_dir: str, hooks: BufferHooks) -> tuple[dict[str, Any], list[Any]] | None:
    """Write the batch's files, quarantining unreadable ones; None when none is left."""
    schema, spec = table.schema(), table.spec()
    # Spark's own Parquet writer reaches only local files; the buffered files are on this worker's disk
    on_executor = settings.rewrite_engine == "spark"
    on_arrow = not table_is_local(table) or settings.rewrite_engine == "local"
    for _ in range(3):
        files = _claimed_files(settings, batch_id)
        missing = [f for f in files if not Path(f.path).is_file()]
        for f in missing:
            _quarantine(settings, f.id, identifier, "file vanished from the buffer zone")
        files = [f for f in files if f not in missing]
        if not files:
            return None
        groups: dict[str, list[str]] = {}
        for f in files:
            groups.setdefault(f.schema_fp, []).append(Path(f.path).as_uri())
        rows_in = sum(f.rows for f in files)
        bytes_in = sum(f.bytes for f in files)
        rows_per_file = max(1, int(_target_size(settings, table) / max(1.0, bytes_in / max(1, rows_in))))
        codec = table.properties.get("write.parquet.compression-codec", "zstd")
        digest_out: Any = None
        read_on_executor: dict[str, Any] = {}
        try:
            if on_executor:
                out, digest_out, read_on_executor = _on_executor(spark, table, spec.spec_id, list(groups.values()),
                                                                 output_dir, rows_per_file, codec)
            elif on_arrow:
                out = consolidate_files_arrow(table, spec, list(groups.values()), output_dir, rows_per_file, codec)
            else:
                out = consolidate_files(spark, schema, spec, list(groups.values()), output_dir, rows_per_file, codec)
            if hooks.after_write:  # a test touches the outputs: read them back here, after it
                call_hook(hooks.after_write, [p for part in out.partitions for p in part.paths])
                digest_out, read_on_executor = None, {}
            if out.required_nulls:
                raise VerificationFailed(f"{out.required_nulls} row(s) have nulls in required columns")
        except (VerificationFailed, FileRejected) as exc:
            bad = _probe(settings, identifier, files, schema, spec)
            paths.delete_tree(table.location(), output_dir, table.io)
            if not bad:
                raise VerificationFailed(f"batch {batch_id}: {exc}") from None
            continue
        except ServiceUnavailable:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("pyspark") or isinstance(exc, pa.ArrowException | OSError):
                bad = _probe(settings, identifier, files, schema, spec)
                paths.delete_tree(table.location(), output_dir, table.io)
                if bad:
                    continue
                why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                raise Retry(f"batch {batch_id}: {'the pyarrow write' if on_arrow else 'Spark'} failed "
                            f"({type(exc).__name__}: {why}); will retry", delay=10) from None
            raise
        if out.digest_in.rows != rows_in:
            paths.delete_tree(table.location(), output_dir, table.io)
            raise VerificationFailed(f"batch {batch_id}: the writer read {out.digest_in.rows} rows but the landed "
                                     f"footers hold {rows_in}")
        # the output read back by field id with plain pyarrow, not by the writer (on the executor under spark)
        if digest_out is None:
            digest_out = parquet_digest(schema, [p for part in out.partitions for p in part.paths], table.io)
        if digest_out != out.digest_in:
            paths.delete_tree(table.location(), output_dir, table.io)
            raise VerificationFailed(
                f"batch {batch_id}: output differs from its input: rows {out.digest_in.rows} → {digest_out.rows}, "
                f"checksum {out.digest_in.checksum} → {digest_out.checksum}")
        data_files = []
        partitions = []
        for part in out.partitions:
            record = Record(*part.values)
            for path in part.paths:
                on_executor_file = read_on_executor.get(path)
                if on_executor_file is not None:
                    on_executor_file.spec_id = spec.spec_id  # not a manifest field: not carried by pickling
                    data_files.append(on_executor_file)
                else:
                    data_files.append(data_file_from_footer(table, path, spec.spec_id, record))
            partitions.append({"values": [_json_value(v) for v in part.values], "outputs": list(part.paths),
                               "key": spec.partition_to_path(record, schema) if spec.fields else ""})
        footer_rows = sum(int(d.record_count) for d in data_files)
        if footer_rows != digest_out.rows:
            paths.delete_tree(table.location(), output_dir, table.io)
            raise VerificationFailed(f"batch {batch_id}: output footers hold {footer_rows} rows, "
                                     f"expected {digest_out.rows}")
        checkpoint = {
            "spec_id": spec.spec_id, "output_dir": output_dir, "file_ids": [f.id for f in files],
            "partitions": partitions, "rows_in": rows_in, "rows_out": footer_rows,
            "checksum_in": out.digest_in.checksum, "checksum_out": digest_out.checksum,
            "bytes_out": sum(int(d.file_size_in_bytes) for d in data_files),
        }
        return checkpoint, data_files
    raise VerificationFailed(f"batch {batch_id}: files kept failing after quarantining the bad ones")


def _on_executor(spark: Any, table: Table, spec_id: int, groups: list[list[str]], output_dir: str,
                 rows_per_file: int, codec: str) -> tuple[Any, Any, dict[str, Any]]:
    """The batch as one task of a Spark job (spark_actors/group_tasks.consolidate_batch): (output, digest read
    back, DataFile by path). The task's error is raised here as if the write ran in this process."""
    job = run_action_job(spark, TableContext.of(table), [(group_tasks.consolidate_batch, (
        spec_id, groups, output_dir, rows_per_file, codec))])
    out, digest, files = job.values()[0]
    return out, digest, files


def _target_size(settings: Settings, table: Table) -> int:
    return int(table.properties.get("write.target-file-size-bytes", settings.default_target_file_size))


def _probe(settings: Settings, identifier: str, files: list[BufferFile], schema: Any, spec: Any) -> list[int]:
    """Read each file fully with pyarrow; quarantine the ones that are not usable. Returns their ids."""
    bad = []
    required = [f.name for f in schema.fields if f.required]
    for f in files:
        try:
            check_file(Path(f.path), schema, spec)
            data = pq.read_table(f.path)
            nulls = [n for n in required if n in data.column_names and data.column(n).null_count]
            if nulls:
                raise FileRejected(f"required column(s) {', '.join(nulls)} hold nulls")
            for name in data.column_names:  # every value must survive the read (corrupt pages fail here)
                pc.count(data.column(name))
        except FileRejected as exc:
            _quarantine(settings, f.id, identifier, str(exc))
            bad.append(f.id)
        except Exception as exc:
            _quarantine(settings, f.id, identifier, f"unreadable: {type(exc).__name__}: {str(exc)[:200]}")
            bad.append(f.id)
    return bad


def _quarantine(settings: Settings, file_id: int, identifier: str, reason: str) -> None:
    """Move a buffered file aside with its reason; it leaves its batch and is never committed."""
    with session_scope(settings) as session:
        f = session.get(BufferFile, file_id, with_for_update=True)
        assert f is not None
        source = Path(f.path)
        target = settings.buffer_dir / identifier / QUARANTINE_DIR / source.name
        root = str(settings.buffer_dir)
        refused = [r for r in (paths.refusal(root, str(source), "move"), paths.refusal(root, str(target), "write"))
                   if r is not None]
        if not refused:  # a file outside the buffer is only marked: it was never ours to move
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.exists():
                source.replace(target)
            f.path = str(target)
        f.state, f.reason = FileState.QUARANTINED.value, reason
        batch_id = f.batch_id
        audit(session, "buffer.file_quarantined", table=identifier, batch=f.batch_id, file=f.source, reason=reason)
    record_refusals(settings, refused, table=identifier, batch=batch_id)
    log.warning("quarantined %s of %s: %s", source, identifier, reason)


def _json_value(value: Any) -> Any:
    return {"decimal": str(value)} if isinstance(value, Decimal) else value


def _from_json(value: Any) -> Any:
    return Decimal(value["decimal"]) if isinstance(value, dict) and "decimal" in value else value


def checkpointed_files(table: Table, checkpoint: dict[str, Any]) -> list[Any] | None:
    """DataFiles of a checkpoint whose outputs all exist with the checkpointed row count, else None."""
    paths = [p for part in checkpoint["partitions"] for p in part["outputs"]]
    if not all(table.io.new_input(p).exists() for p in paths):
        return None
    data_files = [
        data_file_from_footer(table, p, checkpoint["spec_id"], Record(*[_from_json(v) for v in part["values"]]))
        for part in checkpoint["partitions"] for p in part["outputs"]
    ]
    if sum(int(d.record_count) for d in data_files) != checkpoint["rows_out"]:
        return None
    return data_files


