"""Explain: what optimize would do to each partition now, and why, without changing anything (an
untracked table is explained with the tuning tracking would give it, and stays untracked)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from autooptimize.config import Settings
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import PlanFile, plan_bin_pack
from autooptimize.errors import InvalidArgument, TableRefused
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import live_partitions, parse_partition
from autooptimize.services.budget import explain_view
from autooptimize.services.choose import choose, planning_request
from autooptimize.services.rewrite.merge import calibrated, plan_to_dict, select_partitions
from autooptimize.services.table_refusals import note_refused, refused_view
from autooptimize.services.tracking import DEFAULT_ACTIONS, size_arg, tuning_of
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from autooptimize.storage.write_clock import (
    medians_without_each,
    partitions_behind_newest,
    past_horizon_partitions,
    write_clocks,
)


def explain(settings: Settings, identifier: str, partition: str | None = None,
            target_file_size: Any = None, spark: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Per partition: the action decide would choose (``merge``, ``sort``, ``compact_deletes`` or
    ``none``) and its reason code, the groups (input file paths, bytes in, files out), bytes
    rewritten, files replaced, MSE before and after, and every candidate's value and cost; ``engine``
    names the path the groups would be rewritten on (services/rewrite/engine.py).

    Before a table's first rewrite there is no measured output size, and a merge calibrates one before it
    plans, by writing a sample of its inputs on an executor
    (:func:`~autooptimize.services.rewrite.merge.calibrated`). Given
    ``spark`` (a function returning a Spark session, called only then), explain calibrates the same
    way, on the same deterministic sample, so it shows the groups the action will replace; the sample
    is written under a directory of its own and removed. Without it the plan is on raw bytes and
    ``sizing.source`` says ``none``."""
    target_override = size_arg("target_file_size", target_file_size) if target_file_size is not None else None
    try:
        table = load_table(settings, identifier)
        live_partitions(table)  # a manifest listing a file kind this version does not know refuses here
    except TableRefused as refused:
        return refused_view(identifier, note_refused(settings, identifier, refused))
    key = parse_partition(table, partition).key if partition is not None else None
    with session_scope(settings) as session:
        tracked = tracked_table(session, settings.catalog, identifier)
        tuning = tuning_of(tracked) if tracked is not None else None
        table_id = tracked.id if tracked is not None else None
    request = planning_request(
        settings, identifier, tuning, spec_id=table.spec().spec_id if key is not None else None,
        partition_key=key, target_file_size=target_override, table_id=table_id,
    )
    target, tolerance = request.target_file_size, request.tolerance
    allowed = frozenset(tuning.allowed_actions if tuning else DEFAULT_ACTIONS)
    partitions = select_partitions(table, request.spec_id, key)
    if request.sizing.bytes_per_row is None and spark is not None:
        probe = dataclasses.replace(request, action_id=f"explain-{uuid.uuid4().hex[:12]}")
        request = dataclasses.replace(calibrated(spark(), table, partitions, probe), action_id=request.action_id)
    rows = []
    clocks: dict[tuple[int, str], Any] = {}
    past: set[tuple[int, str]] = set()
    behind: set[tuple[int, str]] = set()
    medians: dict[tuple[int, str], int | None] = {}
    if table_id is not None and key is None:  # each partition judged on its own write clock, as decide does
        with session_scope(settings) as session:
            clocks = write_clocks(session, table_id)
            past = past_horizon_partitions(session, table_id)
            behind = partitions_behind_newest(session, table_id)
            medians = medians_without_each(session, table_id, request.target_file_size)

    def own(pf: Any) -> Any:
        if (pf.spec_id, pf.key) not in clocks:
            return request
        at, gaps = clocks[(pf.spec_id, pf.key)]
        return dataclasses.replace(request, spec_id=pf.spec_id, partition_key=pf.key, last_write_ms=at,
                                   write_gaps=gaps, past_late_horizon=(pf.spec_id, pf.key) in past,
                                   newest_partition=(pf.spec_id, pf.key) not in behind,
                                   expected_partition_bytes=medians.get((pf.spec_id, pf.key),
                                                                        request.expected_partition_bytes))

    choices = [(pf, choose(table, pf, own(pf), allowed)) for pf in partitions]
    budget = explain_view(settings, table_id, [(pf.spec_id, pf.key, c) for pf, c in choices])
    for pf, choice in choices:
        decision = choice.decision
        mse = EntropyStats.from_sizes([f.size for f in pf.data_files], target).mse
        row: dict[str, Any] = {"partition": pf.human, "partition_key": pf.key, "action": decision.kind or "none", "reason": decision.reason,
                               "rule": choice.rule,
                               "groups": [], "bytes_rewritten": 0, "files_replaced": 0, "files_out": 0,
                               "mse_before": mse, "mse_after": mse,
                               "candidates": [c.as_dict() for c in decision.candidates],
                               "budget": budget[(pf.spec_id, pf.key)]}
        if choice.plan is not None:
            p = plan_to_dict(pf, choice.plan)
            row.update(groups=p["groups"], bytes_rewritten=p["bytes_rewritten"], files_replaced=p["files_in"],
                       files_out=p["files_out"], mse_after=p["mse_after"])
        elif decision.kind == "compact_deletes":
            files_out = max(1, round(pf.bytes / target))
            row.update(groups=[{"files": [f.path for f in pf.data_files], "bytes_in": pf.bytes,
                                "files_out": files_out, "delete_files": [f.path for f in pf.delete_files]}],
                       bytes_rewritten=pf.bytes, files_replaced=len(pf.data_files), files_out=files_out)
        rows.append(row)
    snapshot = table.current_snapshot()
    return {"table": identifier, "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "target_file_size": target, "tolerance": tolerance, "sizing": request.sizing.as_dict(),
            "engine": request.engine, "partitions": rows}


def whatif(settings: Settings, identifier: str, target_sizes: list[Any], tolerances: list[Any] | None = None,
           ) -> list[dict[str, Any]]:
    """Simulate settings on the table's current files: for each (target, tolerance), the files after,
    bytes rewritten, files replaced and the table's MSE before and after. Changes nothing."""
    if not target_sizes:
        raise InvalidArgument("whatif needs at least one target size (--target-size 64MiB,128MiB)")
    targets = [size_arg("target_file_size", t) for t in target_sizes]
    given = [None if t is None else size_arg("tolerance", t) for t in tolerances or [None]]
    table = load_table(settings, identifier)
    partitions = [pf for pf in select_partitions(table, None, None)]
    results = []
    for target in targets:
        for tol in given:
            tolerance = target // 4 if tol is None else tol
            files_before = files_after = rewritten = replaced = 0
            before, after = EntropyStats.empty(), EntropyStats.empty()
            for pf in partitions:
                sizes = [f.size for f in pf.data_files]
                before = before.merge(EntropyStats.from_sizes(sizes, target))
                plan = plan_bin_pack([PlanFile(f.path, f.size) for f in pf.data_files], target, tolerance)
                replaced_paths = {f.path for g in plan.groups for f in g.files}
                kept = [s for f, s in zip(pf.data_files, sizes, strict=True) if f.path not in replaced_paths]
                outputs = [s for g in plan.groups for s in g.output_sizes()]
                after = after.merge(EntropyStats.from_sizes(kept + outputs, target))
                files_before += len(sizes)
                files_after += len(kept) + len(outputs)
                rewritten += plan.bytes_rewritten
                replaced += plan.files_in
            results.append({"target_file_size": target, "tolerance": tolerance, "files_before": files_before,
                            "files_after": files_after, "files_replaced": replaced, "bytes_rewritten": rewritten,
                            "mse_before": before.mse, "mse_after": after.mse})
    return results
