"""What a table's merges write against what they read, for AutoAnalyze's replay (``domain.output_model``).

In order of trust:

* the table's own REPLACE commits still in its metadata (:func:`learned_output_model`): a fit of the share
  and the weight per file removed once it has :data:`~autooptimize.domain.output_model.MIN_FIT_COMMITS`,
  its mean ratio before;
* while it has no fit, a calibration: a few groups of its own files rewritten by the merge engine into a
  directory of their own, measured and removed (:mod:`autooptimize.services.output_calibration`);
* while it has no REPLACE commit and no calibration, the service's merges of its other tables
  (:func:`borrowed_output_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from autooptimize.domain.output_model import OutputModel, fit_output_model
from autooptimize.storage.models import Action, ActionState

__all__ = ["BORROWED_MERGES", "OUTPUT_RATIO_BOUNDS", "borrowed_output_model", "is_replace", "learned_output_model",
           "learned_output_ratio", "main_snapshots"]


def main_snapshots(table: Table) -> list[Any]:
    """The main branch's snapshots still in the metadata, oldest first, back to the first missing parent."""
    chain = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    chain.reverse()
    return chain


def is_replace(snapshot: Any) -> bool:
    return snapshot.summary is not None and snapshot.summary.operation.value == "replace"


#: The learned output ratio is kept within these bounds (a handful of odd merges must not skew a replay).
OUTPUT_RATIO_BOUNDS = (0.01, 2.0)


def learned_output_ratio(table: Table) -> float:
    """What the table's merged bytes weigh against their inputs, from its REPLACE commits still in the
    metadata (``added-files-size`` over ``removed-files-size``; ours or any compaction's); 1.0 when none.
    The simulator applies it to a writer's file the first time it is merged."""
    return _mean_ratio(_replace_commits(table))


def learned_output_model(table: Table) -> OutputModel:
    """What the table's merges write against what they read (``domain.output_model``), fitted on its REPLACE
    commits still in the metadata (``removed-files-size``, ``added-files-size``, and ``deleted-data-files``
    less ``added-data-files``); the mean ratio alone (:func:`learned_output_ratio`) while the fit is not
    possible or not believable."""
    commits = _replace_commits(table)
    read = [c for c in commits if c[0]]
    fit = fit_output_model(read)
    if fit is None:
        return OutputModel(_mean_ratio(commits), None, len(read))
    return OutputModel(fit[0], fit[1], len(read))


#: The most recent succeeded merges of the service's other tables a table borrows its output model from.
BORROWED_MERGES = 200


def borrowed_output_model(session: Session, table_id: int | None) -> OutputModel | None:
    """What merges write against what they read, fitted (``fit_output_model``) on the service's
    :data:`BORROWED_MERGES` most recent succeeded merges of tables other than ``table_id`` (``ao_actions``:
    bytes and files in and out); None when they allow no fit. A table with no REPLACE commit of its own
    replays with it (with one or more, with its own mean ratio until it has a fit): its merges run on the
    same engine, whose Parquet writer weighs a merged file otherwise than the table's writer did (8.4–8.6 KB
    less per file removed in the DoD 2 live test, where none was assumed; docs/policy-history.md, "An output
    model borrowed from the other tables")."""
    query = (select(Action.bytes_in, Action.bytes_out, Action.files_in, Action.files_out)
             .where(Action.kind == "merge", Action.state == ActionState.SUCCEEDED.value, Action.bytes_in > 0,
                    Action.bytes_out.is_not(None), Action.files_in.is_not(None), Action.files_out.is_not(None))
             .order_by(Action.finished_at.desc()).limit(BORROWED_MERGES))
    if table_id is not None:
        query = query.where(Action.table_id != table_id)
    merges = [(int(i), int(o), int(fi) - int(fo)) for i, o, fi, fo in session.execute(query)]
    fit = fit_output_model(merges)
    return None if fit is None else OutputModel(fit[0], fit[1], len(merges), borrowed=True)


def _replace_commits(table: Table) -> list[tuple[int, int, int]]:
    """(bytes removed, bytes added, data files removed net) of each REPLACE commit still in the metadata."""
    out = []
    for snapshot in main_snapshots(table):
        summary = snapshot.summary
        if is_replace(snapshot) and summary is not None:
            out.append((int(summary.get("removed-files-size") or 0), int(summary.get("added-files-size") or 0),
                        int(summary.get("deleted-data-files") or 0) - int(summary.get("added-data-files") or 0)))
    return out


def _mean_ratio(commits: Sequence[tuple[int, int, int]]) -> float:
    """Bytes added over bytes removed by ``commits``, within :data:`OUTPUT_RATIO_BOUNDS`; 1.0 without either."""
    removed, added = sum(c[0] for c in commits), sum(c[1] for c in commits)
    if not removed or not added:
        return 1.0
    low, high = OUTPUT_RATIO_BOUNDS
    return min(high, max(low, added / removed))
