"""What a table's merges write against what they read, fitted from its REPLACE commits, for the replay.

A merge's output weighs a share of its input (rows that compress better together) less a fixed weight
for each file it removes (every Parquet file carries a footer and metadata of its own). On three live m01
runs the fit was a share of 0.989 and 3.8–4.0 KB a file: 4 writer files of 240 KB merged into 0.944 of
their bytes, 12 merged files of 11 MB into 0.978. One mean ratio (0.978) makes the small merges too big
and the large ones too small, and the policy's choices at a group's margin then part from the service's;
with the fit the replay of each run's writes came within 1.3 % of its write amplification, from 6–7 %
(docs/policy-history.md, "What merged files weigh").

Pure: the standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_FIT_COMMITS", "OutputModel", "fit_output_model"]

#: REPLACE commits needed to fit the model; with fewer the replay uses the mean ratio alone.
MIN_FIT_COMMITS = 10
#: A fitted share outside these bounds (or a negative weight per file) is not believed: the mean ratio is used.
SHARE_BOUNDS = (0.5, 1.5)


@dataclass(frozen=True, slots=True)
class OutputModel:
    """``share`` × the bytes a merge reads, less ``file_overhead`` bytes for each file it removes (None: the
    replay's older model, a writer's file weighing ``share`` × its bytes once first merged); ``commits``:
    the REPLACE commits it was fitted on; ``borrowed``: they are the merges of the service's other tables (a
    table with none of its own, ``services.autotune.borrowed_output_model``)."""

    share: float
    file_overhead: int | None
    commits: int
    borrowed: bool = False


def fit_output_model(commits: Sequence[tuple[int, int, int]]) -> tuple[float, int] | None:
    """The least-squares ``(share, file_overhead)`` of ``written ≈ share × read − file_overhead × removed``
    over ``commits`` of ``(bytes read, bytes written, files removed net)``; None when there are fewer than
    :data:`MIN_FIT_COMMITS`, they cannot tell the two apart (every commit removed as many files per byte),
    or the fit is not believable (a share outside :data:`SHARE_BOUNDS`, a negative weight per file)."""
    if len(commits) < MIN_FIT_COMMITS:
        return None
    sxx = sum(r * r for r, _, _ in commits)
    sdd = sum(d * d for _, _, d in commits)
    sxd = sum(r * d for r, _, d in commits)
    sxo = sum(r * w for r, w, _ in commits)
    sdo = sum(d * w for _, w, d in commits)
    det = sxx * sdd - sxd * sxd
    if det <= 1e-9 * sxx * sdd:
        return None
    share = (sxo * sdd - sdo * sxd) / det
    overhead = (sxd * sxo - sxx * sdo) / det
    if not SHARE_BOUNDS[0] <= share <= SHARE_BOUNDS[1] or overhead < 0:
        return None
    return share, round(overhead)
