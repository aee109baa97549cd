"""Output sizing: what a data file's rows weigh once rewritten, so outputs land near the target.

Small files compress far worse than one large file of the same rows (each carries its own footer,
dictionaries and statistics; measured on the test data: 40 files of 50 rows merged to 0.09 of their
bytes, 10 files of 20,000 rows to 0.30), and a writer's own encodings differ again (pyarrow wrote the
same merged rows 2–3× larger than Spark). Planning on raw input bytes therefore writes files far
under the target. The planners work on :attr:`~autooptimize.domain.planning.PlanFile.out_size`
instead: the file's record count times the output bytes per row that this table's rewrites measured.

Where the figure comes from, in order:

* ``history``: the table's last rewrites (succeeded merge/sort/delete-compaction actions), bytes out
  over rows out, weighted by bytes so large outputs dominate;
* ``calibration``: no rewrite yet, so the action writes a sample of the candidate files with Spark
  into its own output directory, measures it, and removes it (only when sizing can matter: some
  partition holds at least a target's worth of candidates);
* ``none``: raw input bytes (``explain`` before the table's first rewrite says so).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from autooptimize.config import Settings
from autooptimize.domain.actions import NO_SIZING, Sizing
from autooptimize.iceberg.paths import delete_tree
from autooptimize.storage.db import session_scope
from autooptimize.storage.models import Action, ActionState, TrackedTable
from spark_actors.group_tasks import calibrate as write_sample
from spark_actors.rewrite import list_parquet
from spark_actors.schema import spark_schema

REWRITE_KINDS = ("merge", "sort", "zorder", "compact_deletes")
HISTORY_ACTIONS = 5
#: A calibration sample reads up to this many targets' worth of raw candidate bytes: merged small
#: files shrink to a third or less, and compression keeps improving with the rows in a file (measured:
#: a sample of one target's worth predicted 3.06 bytes/row where 0.5 MB outputs wrote 2.50).
CALIBRATION_TARGETS = 4
#: … and never more than this many raw bytes.
CALIBRATION_MAX_BYTES = 256 * 1024 * 1024

__all__ = ["NO_SIZING", "REWRITE_KINDS", "Sizing", "calibrate_spark_sql", "calibration_sample", "learned",
           "write_sample_spark_sql"]


def learned(settings: Settings, identifier: str) -> Sizing:
    """Output bytes per row measured by the table's recent rewrites, or :data:`NO_SIZING`."""
    with session_scope(settings) as session:
        return learned_in(session, settings.catalog, identifier)


def learned_in(session: Any, catalog: str, identifier: str) -> Sizing:
    """:func:`learned` within the caller's transaction."""
    rows = session.execute(
        select(Action.bytes_out, Action.rows_out)
        .join(TrackedTable, TrackedTable.id == Action.table_id)
        .where(TrackedTable.catalog == catalog, TrackedTable.identifier == identifier,
               Action.state == ActionState.SUCCEEDED.value, Action.kind.in_(REWRITE_KINDS),
               Action.bytes_out > 0, Action.rows_out > 0, Action.committed_snapshot_id.is_not(None))
        .order_by(Action.finished_at.desc())
        .limit(HISTORY_ACTIONS)
    ).all()
    if not rows:
        return NO_SIZING
    return Sizing(sum(int(b) for b, _ in rows) / sum(int(r) for _, r in rows), "history")


def calibration_sample(sizes_and_paths: list[tuple[int, str]], target: int) -> list[str]:
    """The largest candidate files (under the target) up to :data:`CALIBRATION_TARGETS` targets' worth,
    capped at :data:`CALIBRATION_MAX_BYTES`: the sample's output should be near the target's size."""
    budget = min(max(target, 1) * CALIBRATION_TARGETS, CALIBRATION_MAX_BYTES)
    chosen: list[str] = []
    total = 0
    for size, path in sorted((sp for sp in sizes_and_paths if sp[0] < target), reverse=True):
        chosen.append(path)
        total += size
        if total >= budget:
            break
    return chosen


def calibrate_arrow(table: Any, inputs: list[Any], directory: str, codec: str, partition: Any) -> Sizing:
    """Write the DataFiles ``inputs`` as one file with the pyarrow path under ``directory`` (removed
    afterwards) and measure: the same sample an executor writes (spark_actors.group_tasks.calibrate)."""
    rows, size = write_sample(table, inputs, directory, codec, partition)
    return Sizing(size / rows, "calibration") if rows else NO_SIZING


def calibrate_spark_sql(spark: Any, table: Any, paths: list[str], directory: str, codec: str) -> Sizing:
    """Write ``paths`` as one file with Spark under ``directory`` (removed afterwards) and measure."""
    rows, size = write_sample_spark_sql(spark, table, paths, directory, codec)
    return Sizing(size / rows, "calibration") if rows else NO_SIZING


def write_sample_spark_sql(spark: Any, table: Any, paths: list[str], directory: str, codec: str) -> tuple[int, int]:
    """(rows, bytes) of ``paths`` written as one file by Spark's own writer under ``directory`` (removed
    afterwards)."""
    import pyarrow.parquet as pq

    delete_tree(table.location(), directory, table.io)
    try:
        df = spark.read.schema(spark_schema(table.schema())).parquet(*paths)
        df.coalesce(1).write.mode("error").option("compression", codec).parquet(directory)
        rows = size = 0
        for path in list_parquet(directory):
            f = table.io.new_input(path)
            with f.open() as stream:
                rows += pq.read_metadata(stream).num_rows
            size += len(f)
    finally:
        delete_tree(table.location(), directory, table.io)
    return rows, size
