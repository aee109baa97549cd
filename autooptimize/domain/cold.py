"""The cold rules of the live-partition policy (:func:`~autooptimize.domain.policy.plan_partition`, which
re-exports this module): a partition no longer written to is finished once, and a small one finished
early is not read whole again for a late trickle.

A partition is cold once no file has arrived for its own cold-after time: the table's, or sooner from its
recent gaps between writes, or at once past the table's late horizon
(:mod:`autooptimize.domain.policy_clock`). Cold **early** means by its own gaps only: the table's
cold-after time has not passed since its last write, and it is not past the late horizon. The rules, as
``explain`` names them:

``cold_finish``       every file under ¾ of the target merges once into the best layout its bytes allow
                      (an even split of ``round(B / target)`` files)
``cold_rest``         cold early, in a partition whose scale is under the target (it ends as one file),
                      with one file that holds at least :data:`COLD_REST` (⅘) of the bytes of the files
                      under ¾ of the target: only the others merge, and the largest waits for the table's
                      cold-after time, when ``cold_finish`` takes them all
``cold_wait``         the same, but fewer than ``min_input_files`` files beside the largest: nothing merges
                      before the table's cold-after time (a wait, judged again then)
``nothing_to_merge``  fewer than ``min_input_files`` files under ¾ of the target

Why ``cold_rest``: a late file often comes after a partition's gaps said it was cold. In a partition whose
bytes are under the target, the cold finish of everything then re-read the whole partition for one late
file, once per such file. At the service's latency (a merge in 0.35 s) that was half the bytes the family's
128–512 MiB members with 10–50 MB hours rewrote (docs/policy.md, "A late file no longer re-reads a small
partition"). The largest file is read once more, at the table's cold-after time, when late data has had
time to arrive.

Pure code: exact integers throughout.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["COLD_DONE_DENOMINATOR", "COLD_DONE_NUMERATOR", "COLD_REST", "COLD_RULES", "cold_group"]

#: Cold, files under this share of the target are merged into the best layout (Iceberg's bin-pack rule,
#: so the end layout is the bin-pack's).
COLD_DONE_NUMERATOR, COLD_DONE_DENOMINATOR = 3, 4
#: (numerator, denominator): cold early, a file holding this share of the small files' bytes or more waits
#: for the table's cold-after time while the rest merge (the rest weigh at most a quarter of it). ⅔ saved
#: a little more in the simulator, but read the rest twice where late data had stopped: the leftovers of a
#: written hour beside its biggest file, merged early and again with it at the table's time.
COLD_REST = (4, 5)
#: The rules of this module: two merge, two leave the partition alone.
COLD_RULES = ("cold_finish", "cold_rest", "cold_wait", "nothing_to_merge")


def cold_group(sizes: Sequence[int], by_size: Sequence[int], target: int, min_input_files: int, *,
               early: bool, whole: bool) -> tuple[list[int], str]:
    """The indices of ``sizes`` a cold partition merges into its layout, and the rule (see the module doc).
    ``by_size``: every index, ascending by size (ties in a fixed order). ``early``: cold by its own gaps only;
    ``whole``: its scale is under the target (it ends as one file)."""
    small = [i for i in by_size if sizes[i] < target * COLD_DONE_NUMERATOR // COLD_DONE_DENOMINATOR]
    if len(small) < min_input_files:
        return [], "nothing_to_merge"
    held = sum(sizes[i] for i in small)
    if early and whole and COLD_REST[1] * sizes[small[-1]] >= COLD_REST[0] * held:
        rest = small[:-1]
        return (rest, "cold_rest") if len(rest) >= min_input_files else ([], "cold_wait")
    return small, "cold_finish"
