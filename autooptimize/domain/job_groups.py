"""Large partitions: rewrite groups that each fit one Spark job, and commit batches of them.

* :func:`cap_groups` splits every group whose input exceeds ``max_group_bytes`` into consecutive runs
  of at most that many bytes (consecutive: an ordered plan's runs stay in order, so sorted ranges stay
  disjoint). A run of fewer than ``min_input_files`` files is dropped (its files are kept as they
  are): no group is ever over the cap, and a file alone larger than the cap is never rewritten.
* :func:`per_commit` is how many finished groups make one commit under partial progress: groups are
  committed in at most ``max_commits`` batches (Iceberg's ``partial-progress.max-commits`` rule).
"""

from __future__ import annotations

from collections.abc import Sequence

from autooptimize.domain.checks import positive_int
from autooptimize.domain.entropy import EntropyStats
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, expected_outputs

__all__ = ["cap_groups", "per_commit", "split_run"]


def split_run(files: Sequence[PlanFile], max_group_bytes: int) -> list[list[PlanFile]]:
    """Cut ``files`` (in order) into consecutive runs of at most ``max_group_bytes`` input bytes.

    A file larger than the cap is a run of its own (the caller drops it).
    """
    cap = positive_int("max_group_bytes", max_group_bytes)
    runs: list[list[PlanFile]] = []
    run: list[PlanFile] = []
    total = 0
    for f in files:
        if run and total + f.size > cap:
            runs.append(run)
            run, total = [], 0
        run.append(f)
        total += f.size
    if run:
        runs.append(run)
    return runs


def cap_groups(plan: Plan, files: Sequence[PlanFile], max_group_bytes: int, min_input_files: int = 2) -> Plan:
    """``plan`` with no group over ``max_group_bytes`` input bytes; ``files`` are the partition's files.

    Groups within the cap are kept as planned (same files, same outputs). Figures (``mse_after``,
    ``files_after``) are recomputed under the planners' output model.
    """
    cap = positive_int("max_group_bytes", max_group_bytes)
    minimum = positive_int("min_input_files", min_input_files)
    if all(g.bytes_in <= cap for g in plan.groups):
        return plan
    groups: list[RewriteGroup] = []
    for group in plan.groups:
        if group.bytes_in <= cap:
            groups.append(group)
            continue
        for run in split_run(group.files, cap):
            if len(run) >= minimum and sum(f.size for f in run) <= cap:
                groups.append(RewriteGroup(tuple(run), expected_outputs(sum(f.rewritten_size for f in run),
                                                                        plan.target)))
    replaced = {f.path for g in groups for f in g.files}
    kept = [f.size for f in files if f.path not in replaced]
    written = [s for g in groups for s in g.output_sizes()]
    after = EntropyStats.from_sizes(kept + written, plan.target)
    return Plan(target=plan.target, tolerance=plan.tolerance, groups=tuple(groups), mse_before=plan.mse_before,
                mse_after=after.mse, files_before=plan.files_before, files_after=after.n)


def per_commit(groups: int, max_commits: int) -> int:
    """Finished groups per commit so that ``groups`` take at most ``max_commits`` commits (≥ 1)."""
    positive_int("max_commits", max_commits)
    return max(1, -(-groups // max_commits))
