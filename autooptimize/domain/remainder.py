"""The cold finish's remainder and a home for it (a table's ``cold_absorb`` tuning).

A cold finish merges every file under ¾ of the target into the best layout its bytes allow. When those
files weigh less than ¾ of a target together (or a lone small file is left), that layout is one small
file beside files that are nearly full (¾ of the target or more, under it), which no rule rewrites. At
the end of a stream that small file is the excess a partition keeps: on ``benchmarks.streaming --member
m08`` the service ended with 4.8× the bin-pack's excess MSE from a 28 MiB remainder beside a 107 MiB file
(docs/policy-history.md, "Why m08 ends with 4.7× the bin-pack's excess").

With ``cold_absorb`` the cold finish also takes the smallest nearly full file the remainder fits beside
(within ``ABSORB_CAP_NUMERATOR / ABSORB_CAP_DENOMINATOR`` of a target together), so the two become one
file of ¾ of the target or more. It costs that file's bytes again each time the partition goes cold with
a remainder: on hourly streams with late data a partition goes cold again after each late file, which
is why it is off by default and AutoAnalyze turns it on for a table whose own history ends short of the
bin-pack's end layout without it.

Pure: the standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ABSORB_CAP_DENOMINATOR", "ABSORB_CAP_NUMERATOR", "DEFAULT_COLD_ABSORB", "remainder_home"]

#: Whether the cold finish gives its remainder a home by default (AO_COLD_ABSORB; a table's own tuning).
DEFAULT_COLD_ABSORB = False
#: The remainder and its home weigh at most this share of the target together (one output file).
ABSORB_CAP_NUMERATOR, ABSORB_CAP_DENOMINATOR = 5, 4


def remainder_home(group: Sequence[int], by_size: Sequence[int], sizes: Sequence[int], target: int,
                   cold_done: int) -> int | None:
    """The index of the file the cold finish's ``group`` (indexes into ``sizes``, the files under
    ``cold_done`` bytes) should absorb: the smallest file of ``cold_done`` bytes or more, under ``target``,
    that fits beside the group's bytes within the cap. None when the group weighs ``cold_done`` or more
    together (its layout needs no home), is empty, or no file fits. ``by_size``: every index, smallest
    file first."""
    remainder = sum(sizes[i] for i in group)
    if not group or remainder >= cold_done:
        return None
    cap = target * ABSORB_CAP_NUMERATOR // ABSORB_CAP_DENOMINATOR
    for i in by_size:
        if cold_done <= sizes[i] < target and sizes[i] + remainder <= cap:
            return i
    return None
