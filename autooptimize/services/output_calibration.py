"""A first output model for a table with no fit of its own: a few groups of its own files rewritten by the
merge engine, measured and removed.

AutoAnalyze's replay needs what a merge writes against what it reads (``domain.output_model``). A table
fits that on its own REPLACE commits once it has ten. Before, it borrowed the fit of the service's merges
of its other tables, and a lone table assumed merged bytes weigh what they read. Neither knows the table:
the merge engine's writer weighs a merged file otherwise than the table's writer did (in the DoD 2 live
test, each file a merge of pyiceberg's files removed saved 8.4–8.6 KB, where footers explain 1.2 KB), and
how rows compress together is the table's own. A first prediction without it ran 7–15 % high on write
amplification (docs/policy-history.md, "A first output model from a calibration, and m03 with the margin").

The calibration (:func:`calibrate_output_model`): up to twelve groups of the table's files under the target,
each from one partition, of 2, 3, 4, 6, 8 and 12 files in turn
(:func:`~autooptimize.domain.output_model.calibration_groups`), and six single files across the sizes, each
rewritten alone (``calibration_singles``), at most ``sizing.CALIBRATION_MAX_BYTES`` read in all (a sizing
calibration's budget). Each group
is written as one file by the engine the table's merges use: a task on an executor for ``spark`` (one job
for all of them, as an action's groups), Spark's own writer for ``spark_sql`` where it can reach the table,
this process for ``local``. Each lands in a directory of its own under the table's data location
(``ao-calibrate-<id>``), is measured, and is removed; nothing is committed. A crash between the write and
the removal leaves files no snapshot references, which orphan removal deletes once they are older than its
minimum age. The single files give what the engine's writer makes of a writer's file alone
(``first_ratio``); the groups, read at that ratio, give the share and the weight per file removed. The
result is recorded with the suggestion and reused until the table fits its own model, so a table is
calibrated once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.domain.actions import Engine
from autooptimize.domain.output_model import (
    MIN_CALIBRATION_GROUPS,
    OutputModel,
    calibration_groups,
    calibration_singles,
    fit_output_model,
)
from autooptimize.engines.types import SPARK, engine_for
from autooptimize.iceberg.fileio import table_is_local
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.paths import delete_tree
from autooptimize.services import evolution
from autooptimize.services.rewrite.merge import merge_refusal
from autooptimize.services.rewrite.outputs import action_dir
from autooptimize.services.sizing import CALIBRATION_MAX_BYTES, write_sample_spark_sql
from spark_actors import group_tasks
from spark_actors.action_job import TableContext, run_action_job

log = logging.getLogger(__name__)

__all__ = ["calibrate_output_model", "choose_output_model", "model_of"]


def calibrate_output_model(settings: Settings, table: Table, target: int,
                           spark: Callable[[], Any] | None) -> dict[str, Any] | None:
    """Rewrite a few groups of ``table``'s files under ``target`` with the merge engine (AO_REWRITE_ENGINE),
    measure each output and remove it; the fitted model as a record (``share``, ``file_overhead``,
    ``first_ratio``, ``groups``, ``singles``, ``bytes_read``, ``engine``, ``seconds``). None, with nothing written, when the table has fewer than
    :data:`~autooptimize.domain.output_model.MIN_CALIBRATION_GROUPS` groups' worth of such files, may hold
    files without field ids, or needs Spark and ``spark`` is None. A failed rewrite raises, after its
    directories are removed."""
    engine = Engine(settings.rewrite_engine)
    if (engine != Engine.LOCAL and spark is None) or evolution.may_hold_files_without_ids(table):
        return None
    parts = [pf for _, pf in sorted(live_partitions(table).items()) if merge_refusal(table, pf) is None]
    sized = [[(f.size, f.path) for f in pf.data_files] for pf in parts]
    chosen = calibration_groups(sized, target, CALIBRATION_MAX_BYTES)
    if len(chosen) < MIN_CALIBRATION_GROUPS:
        return None
    files = {f.path: f for pf in parts for f in pf.data_files}
    spent = sum(files[p].size for _, paths in chosen for p in paths)
    singles = [(i, [p]) for i, p in calibration_singles(sized, target, CALIBRATION_MAX_BYTES - spent)]
    started = time.monotonic()
    cid = f"calibrate-{uuid.uuid4().hex[:12]}"
    codec = table.properties.get("write.parquet.compression-codec", "zstd")
    runs = chosen + singles  # each written as one file: the groups, then the single files alone
    dirs = {i: action_dir(table, parts[i], cid) for i, _ in runs}
    calls = [(group_tasks.calibrate, ([files[p].data_file for p in paths], f"{dirs[i]}/g{n}", codec,
                                      (parts[i].spec_id, parts[i].record)))
             for n, (i, paths) in enumerate(runs)]
    try:
        if engine == Engine.LOCAL:
            measured = [fn(table, *args) for fn, args in calls]
        elif (engine == Engine.SPARK_SQL and table_is_local(table)
              and engine_for(table.schema(), field_ids=True) == SPARK):
            session = spark()  # type: ignore[misc]
            measured = [write_sample_spark_sql(session, table, paths, f"{dirs[i]}/g{n}", codec)
                        for n, (i, paths) in enumerate(runs)]
        else:  # spark, and spark_sql where Spark's writer cannot reach: on the executors, as a merge's groups
            measured = run_action_job(spark(), TableContext.of(table), calls).values()  # type: ignore[misc]
    finally:
        for directory in dirs.values():
            delete_tree(table.location(), directory, table.io)
    sizes = [(sum(files[p].size for p in paths), int(size), len(paths) - 1)
             for (_, paths), (_, size) in zip(runs, measured, strict=True)]
    alone = sizes[len(chosen):]
    # what the engine's writer makes of a writer's file alone; the groups are fitted on top of it
    first = sum(w for _, w, _ in alone) / sum(r for r, _, _ in alone) if alone else 1.0
    samples = [(round(r * first), w, d) for r, w, d in sizes[:len(chosen)]]
    read, written = sum(r for r, _, _ in sizes[:len(chosen)]), sum(w for _, w, _ in samples)
    fit = fit_output_model(samples, MIN_CALIBRATION_GROUPS)
    # not believable: the mean ratio, with the writer's part in it
    share, overhead, first = fit + (first,) if fit is not None else (written / read, None, 1.0)
    record = {"share": share, "file_overhead": overhead, "first_ratio": first, "groups": len(samples),
              "singles": len(alone), "bytes_read": read, "bytes_written": written, "engine": engine.value,
              "seconds": round(time.monotonic() - started, 2)}
    log.info("calibrated %s's output model on %d groups and %d single files (%d bytes) with %s: a writer's "
             "file rewritten alone weighs %.3f×, then share %.3f and %s bytes per file removed", table.name(),
             len(samples), len(alone), read, engine.value, first, share, overhead)
    return record


def model_of(record: dict[str, Any]) -> OutputModel:
    """The :class:`OutputModel` a calibration record stands for."""
    overhead = record.get("file_overhead")
    return OutputModel(float(record["share"]), None if overhead is None else int(overhead), int(record["groups"]),
                       calibrated=True, first_ratio=float(record.get("first_ratio", 1.0)))


def choose_output_model(settings: Settings, table: Table, own: OutputModel, borrowed: OutputModel | None,
                        recorded: dict[str, Any] | None, target: int,
                        spark: Callable[[], Any] | None) -> tuple[OutputModel, dict[str, Any] | None, str | None]:
    """The model a suggestion replays with, the calibration record it rests on (None when it rests on none)
    and why a calibration was wanted but not made (None otherwise). ``own``: the table's REPLACE commits'
    (:func:`~autooptimize.services.output_models.learned_output_model`); ``borrowed``: the service's other
    tables' merges'; ``recorded``: the calibration its last suggestion recorded.

    The table's own fit first; while it has none, a calibration: the recorded one when the same engine made
    it, else a new one; while there is none, the borrowed fit for a table without REPLACE commits, and the
    table's mean ratio otherwise."""
    if own.file_overhead is not None:
        return own, None, None
    note = None
    record = recorded if recorded and recorded.get("engine") == settings.rewrite_engine else None
    if record is None:
        try:
            record = calibrate_output_model(settings, table, target, spark)
        except Exception as exc:  # the replay goes on without it; the reason is shown and logged
            note = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("calibrating %s's output model failed (%s)", table.name(), note)
    if record is not None:
        return model_of(record), record, None
    fallback = borrowed if borrowed is not None and not own.commits else own
    return fallback, None, note
