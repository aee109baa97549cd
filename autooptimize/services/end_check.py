"""The end layout in a check of a prediction (:func:`autooptimize.services.autotune.check_prediction`).

A replay ends once every partition has gone cold and been finished; the table is checked while it is written.
So the check compares the end layout only on the partitions the table has finished: written to since the
tuning in force was set, and not since for longer than that tuning's cold-after time plus two merges' latency
and :data:`FINISH_SLACK_SECONDS`, and with no action of ours queued or running on it (a finish held back by a
budget or a tenant's cap is not the tuning's end layout). On those the replay's end layout, the bin-pack's replay of the same writes,
and the files the table holds now are set side by side, each with how far it misses the end goal
(``domain.goals.end_shortfall``).

The search (``domain.suggest.end_in_force``) then judges the tuning in force's end layout on what the table
did rather than on its replay, when the check saw at least ``domain.suggest.MIN_END_PARTITIONS`` finished: on
m06 a tuning kept 86 files and 5.0 MiB² of excess at the end, within the goal, where its own replay left
22.9 MiB² on every phase of the listener's clock, so the search moved on from a tuning that had held
(docs/policy-history.md, "The loop on m04 and m06").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from pyiceberg.table import Table

from autooptimize.domain.entropy import end_layout
from autooptimize.domain.goals import end_shortfall
from autooptimize.domain.policy import PolicyTuning
from autooptimize.domain.simulate import Figures, Write
from autooptimize.iceberg.files import live_partitions

__all__ = ["FINISH_SLACK_SECONDS", "end_check", "finish_after", "finished_partitions",
           "realised_end"]

#: Seconds past a partition's cold-after time and two merges' latency before a check counts it finished.
FINISH_SLACK_SECONDS = 60.0

MIB2 = float(1 << 40)


def finish_after(tuning: PolicyTuning, latency: float) -> float:
    """Seconds without a write after which a check counts a partition finished under ``tuning``."""
    return tuning.cold_after_seconds + 2 * latency + FINISH_SLACK_SECONDS


def finished_partitions(writes: Sequence[Write], measure_from: float, now: float, after: float) -> set[Hashable]:
    """The partitions ``writes`` wrote to at or after ``measure_from`` and not since ``now - after`` (seconds,
    as ``Write.at``)."""
    newest: dict[Hashable, float] = {}
    for w in writes:
        for part, _ in w.files:
            newest[part] = w.at
    return {p for p, at in newest.items() if measure_from <= at <= now - after}


def realised_end(table: Table, finished: set[Hashable], key_of: Callable[[int, str], Hashable],
                 target: int) -> tuple[int, float]:
    """Files and excess MSE (bytes²) of the ``finished`` partitions as the table holds them now;
    ``key_of(spec_id, key)``: a partition's replay key."""
    sizes = [[f.size for f in pf.data_files] for (spec_id, key), pf in live_partitions(table).items()
             if key_of(spec_id, key) in finished]
    return end_layout(sizes, target)


def end_check(predicted: Figures, baseline: Figures, realised: tuple[int, float], partitions: int,
              after: float) -> dict[str, Any]:
    """The check's ``end`` entry: the replay's, the bin-pack replay's and the table's end layout on
    ``partitions`` finished partitions, and the shortfall of the replay's and of the table's."""
    def layout(files: int, excess: float) -> dict[str, float]:
        return {"end_files": files, "end_excess_mse_mib2": excess / MIB2}

    base = baseline.end_files, baseline.end_excess_mse
    return {"partitions": partitions, "finished_after_seconds": after,
            "predicted": layout(predicted.end_files, predicted.end_excess_mse),
            "realised": layout(*realised), "baseline": layout(*base),
            "shortfall": {"predicted": end_shortfall(predicted.end_files, predicted.end_excess_mse, *base),
                          "realised": end_shortfall(*realised, *base)}}
