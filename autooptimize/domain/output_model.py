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

__all__ = ["CALIBRATION_FANS", "CALIBRATION_GROUPS", "MIN_CALIBRATION_GROUPS", "MIN_FIT_COMMITS", "OutputModel",
           "CALIBRATION_SINGLES", "calibration_groups", "calibration_singles", "fit_output_model"]

#: REPLACE commits needed to fit the model; with fewer the replay uses the mean ratio alone.
MIN_FIT_COMMITS = 10
#: Calibration groups needed to fit it: chosen to remove different numbers of files per byte read, and
#: measured by one writer with nothing else in the commit, fewer tell the two terms apart.
MIN_CALIBRATION_GROUPS = 6
#: A fitted share outside these bounds (or a negative weight per file) is not believed: the mean ratio is used.
SHARE_BOUNDS = (0.5, 1.5)


@dataclass(frozen=True, slots=True)
class OutputModel:
    """``share`` × the bytes a merge reads, less ``file_overhead`` bytes for each file it removes (None: the
    replay's older model, a writer's file weighing ``share`` × its bytes once first merged); ``commits``:
    the REPLACE commits (or calibration groups) it was fitted on; ``borrowed``: they are the merges of the
    service's other tables (a table with none of its own, ``services.output_models.borrowed_output_model``);
    ``calibrated``: they are groups of the table's own files rewritten by the merge engine and removed
    (``services.output_calibration``)."""

    share: float
    file_overhead: int | None
    commits: int
    borrowed: bool = False
    calibrated: bool = False
    #: what the merge engine's writer makes of a writer's file alone, before the share and the footers: a
    #: calibration measures it on single files; 1 for a fit on REPLACE commits (its share takes it in)
    first_ratio: float = 1.0


def fit_output_model(commits: Sequence[tuple[int, int, int]],
                     min_commits: int = MIN_FIT_COMMITS) -> tuple[float, int] | None:
    """The least-squares ``(share, file_overhead)`` of ``written ≈ share × read − file_overhead × removed``
    over ``commits`` of ``(bytes read, bytes written, files removed net)``; None when there are fewer than
    ``min_commits``, they cannot tell the two apart (every commit removed as many files per byte),
    or the fit is not believable (a share outside :data:`SHARE_BOUNDS`, a negative weight per file)."""
    if len(commits) < min_commits:
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


#: A calibration's groups take these many files in turn: they remove different numbers of files per byte
#: read, so that the fit can tell the share from the weight per file.
CALIBRATION_FANS = (2, 3, 4, 6, 8, 12)
#: Groups a calibration rewrites at most (two of each fan-in).
CALIBRATION_GROUPS = 12


def calibration_groups(partitions: Sequence[Sequence[tuple[int, str]]], target: int, max_bytes: int,
                       groups: int = CALIBRATION_GROUPS) -> list[tuple[int, list[str]]]:
    """Up to ``groups`` groups of ``(partition index, paths)`` for a calibration, from ``partitions`` (each a
    list of ``(size, path)`` of its data files): within one partition the files under ``target``, smallest
    first as the policy's first merges take them, cut into runs of :data:`CALIBRATION_FANS` files in turn
    (a run shortened while its bytes reach the target, never under two files); partitions with the most
    such files first. They read at most ``max_bytes`` in all. Deterministic: the same files give the same
    groups."""
    small = [sorted((s, p) for s, p in files if s < target) for files in partitions]
    order = sorted(range(len(small)), key=lambda i: (-len(small[i]), i))
    out: list[tuple[int, list[str]]] = []
    spent, turn = 0, 0
    for i in order:
        files, pos = small[i], 0
        while len(out) < groups and len(files) - pos >= 2:
            run = files[pos:pos + CALIBRATION_FANS[turn % len(CALIBRATION_FANS)]]
            while len(run) > 2 and sum(s for s, _ in run) >= target:
                run = run[:-1]
            size = sum(s for s, _ in run)
            if size >= target:
                break  # the partition's smallest files left already make a target's worth
            if spent + size > max_bytes:
                return out
            out.append((i, [p for _, p in run]))
            spent, pos, turn = spent + size, pos + len(run), turn + 1
        if len(out) >= groups:
            break
    return out


#: Single files a calibration rewrites alone: what the merge engine's writer makes of a writer's file.
CALIBRATION_SINGLES = 6


def calibration_singles(partitions: Sequence[Sequence[tuple[int, str]]], target: int, max_bytes: int,
                        count: int = CALIBRATION_SINGLES) -> list[tuple[int, str]]:
    """``count`` files under ``target`` as ``(partition index, path)``, at evenly spaced ranks of all such
    files by size (the smallest and the largest among them), the largest left out while they read more than
    ``max_bytes``: each is rewritten alone, so the calibration measures the engine's writer apart from what
    merging saves. Deterministic."""
    pool = sorted((s, p, i) for i, files in enumerate(partitions) for s, p in files if s < target)
    if len(pool) > count:
        ranks = sorted({round(j * (len(pool) - 1) / (count - 1)) for j in range(count)})
        pool = [pool[r] for r in ranks]
    while pool and sum(s for s, _, _ in pool) > max_bytes:
        pool.pop()  # the largest
    return [(i, p) for _, p, i in pool]
