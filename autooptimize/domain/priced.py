"""The priced live rule (``PolicyTuning.price`` > 0, ``AO_MERGE_PRICE``): while a partition that fills
target files is written to, merge only where the files a merge saves are worth the bytes it reads.

On by default at :data:`DEFAULT_PRICE` (0 turns it off: the tiers); AutoAnalyze searches other prices per
table (``whatif --suggest``, ``track --auto-tune``). It replaces
the tiers (and quiet merging) of :func:`~autooptimize.domain.policy.plan_partition` in a partition whose
scale is the target (it received, or the table's history says it will hold, a target's bytes); elsewhere,
and once cold, the policy's own rules apply. The rules, as ``explain`` names them:

``filled``       the files under ¾ of the target weigh :data:`FILL` (15/16) of a target: they are packed,
                 largest first, into one file of at most :data:`FILL_CAP` (5/4) targets
``priced``       the small files, ascending, fall into runs: a file more than :data:`PRICE_RATIO`
                 times the bytes before it in its run starts a new run. Among the prefixes of the runs,
                 the one with the most ``(k − 1) · worth − bytes`` is merged (``k`` files). In the newest
                 time partition of its spec (and in a partition without a time field) a file saved is
                 worth ``(target − small bytes) / price``: the bytes still to come before the partition
                 fills its next file, priced; that prefix merges only when it holds
                 :data:`NEWEST_MIN_FILES` (6) files or more. Behind the newest only late data arrives, so
                 a file saved is worth any bytes: the longest prefix merges (of a run after the first,
                 only one of :data:`RUN_MIN_FILES` files or more)
``priced_wait``  no prefix is worth its bytes yet (a skip, judged again as ``live_wait`` is)

Why: a schedule that knows every write (``benchmarks.policy_foresight``) lets the hour being written
gather its writer's files and writes each byte about once, and merges the small partitions late data
reaches at once. In the simulator (``benchmarks.policy_priced``, ``benchmarks.policy_sim --price 0``;
docs/policy-history.md) this rule rewrites 0.03–0.17 less per byte written than the tiers on the four
streaming traces at 8 MiB, at about their files, holds the family's goals on more members, and leaves the
members whose partitions are small against the target to the tiers. Why these constants are the defaults:
docs/policy-history.md, "The priced rule as the default"; why the price is 23: "The price at 23, after the
actions got faster".

Pure code: exact integers throughout.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_PRICE", "FILL", "FILL_CAP", "NEWEST_MIN_FILES", "PRICE_RATIO", "PRICED_RULES", "RUN_MIN_FILES",
           "priced_group"]

#: The price the service runs with unless a table or AO_MERGE_PRICE says otherwise (0: the tiers).
DEFAULT_PRICE = 23
#: A file joins a prefix only while it is at most this many times the bytes before it.
PRICE_RATIO = 2
#: (numerator, denominator) of a target: the small files are packed once they weigh this much.
FILL = (15, 16)
#: (numerator, denominator) of a target: a filled file holds at most this much (Iceberg's own rewrite
#: writes files up to 1.8 targets; 9/8 left a remainder beside nearly full files once a partition went cold).
FILL_CAP = (5, 4)
#: In the newest partition the best prefix merges only once it holds this many files. A merge that lands
#: at once (0.35 s today) would otherwise merge the writer's files two or three at a time, and its output
#: again with the next two: each byte read about log₂ of its file's growth times, where a schedule with
#: foresight lets them gather (docs/policy-history.md, "The family with foresight, and merges as fast as
#: today's").
NEWEST_MIN_FILES = 6
#: Behind the newest partition, a run of small files that does not start at the partition's smallest (each
#: file of a run is at most :data:`PRICE_RATIO` times the bytes before it in the run) merges only once it
#: holds this many files. With one run only, a file much smaller than the rest stopped every merge of its
#: partition until it went cold: on unseen seeds of the family a partition held 80 files for hours, and the
#: table 2.9× the bin-pack's (docs/policy-history.md, "One small file held a partition back"). Runs of 6
#: rewrote more bytes: a late file re-read the few merged files beside it.
RUN_MIN_FILES = 8
#: The rules of this module: two merge, one waits.
PRICED_RULES = ("filled", "priced", "priced_wait")


def priced_group(sizes: Sequence[int], by_size: Sequence[int], target: int, price: float, newest: bool,
                 ratio: float = PRICE_RATIO, fill: tuple[int, int] = FILL,
                 out_sizes: Sequence[int] | None = None) -> tuple[list[int], str]:
    """The indices of ``sizes`` to merge into one file, and the rule (see the module doc). ``by_size``: every
    index, ascending by size (ties in a fixed order). ``price`` > 0. ``ratio`` and ``fill`` are the
    service's constants; ``benchmarks.policy_priced`` tries others. ``out_sizes``: what each file weighs
    once rewritten (the rewrite's size estimate; default ``sizes``): the fill, the cap of a filled file
    and the bytes still to come are judged in it, so a filled file is a target's bytes as written, not as
    read. Which files are small, and the bytes a merge reads, stay the files' own sizes."""
    out = sizes if out_sizes is None else out_sizes
    small = [i for i in by_size if 4 * sizes[i] < 3 * target]
    total = sum(out[i] for i in small)
    if len(small) >= 2 and fill[1] * total >= fill[0] * target:
        group, held = [], 0
        for i in reversed(small):
            if FILL_CAP[1] * (held + out[i]) <= FILL_CAP[0] * target:
                group.append(i)
                held += out[i]
        if len(group) >= 2:
            return group, "filled"
    room = max(0, target - total)
    best: float = 0
    window = (0, 0)  # small[window[0]:window[1]] is merged
    start = run = 0
    for k, i in enumerate(small):
        if k > start and sizes[i] > ratio * run:
            start, run = k, 0  # too big to join the files before it: a run of its own starts here
        run += sizes[i]
        n = k + 1 - start
        if n < 2:
            continue
        if not newest:
            if (not start or n >= RUN_MIN_FILES) and n > window[1] - window[0]:
                window = (start, k + 1)  # a file saved is worth any bytes: the longest run
            continue
        value = (n - 1) * room - price * run  # (n − 1) · room / price − run, times price
        if value > best:
            best, window = value, (start, k + 1)
    if newest and window[1] - window[0] < NEWEST_MIN_FILES:
        window = (0, 0)
    return (small[window[0]:window[1]], "priced") if window[1] > window[0] else ([], "priced_wait")
