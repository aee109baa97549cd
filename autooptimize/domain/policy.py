"""Merge policy for partitions that are still being written: tiered while live, one merge once settled.

A partition is **live** while its newest file arrived less than ``settle_seconds`` ago (the caller
decides, see :func:`is_live`), **settled** otherwise. The rules, named in :attr:`PolicyPlan.rule` so
``explain`` can show which one applied:

``below_excess``      the partition is within the excess rule
                      (:func:`~autooptimize.domain.entropy.excess_needs_attention`): nothing to do
``tiered``            live: the smallest files merge once ``fan_in`` of similar size have gathered
                      (:data:`TINY_FAN_IN` while they weigh under ``target // TINY_DIVISOR`` together)
``live_wait``         live, over the excess rule, but no tier holds ``fan_in`` files yet
``settled_full``      settled: every file under the target is merged into one group (an even split)
``settled_partial``   settled: the small files merge, the largest ones stay (see *absorb* below)
``nothing_to_merge``  over the excess rule, but no group is allowed (e.g. one late file beside a big one)

**Tiers** (live). Files under ``target // LIVE_LARGE_DIVISOR`` are sorted by size and cut into tiers:
a tier starts at its smallest file and holds every file under ``fan_in`` times that size. Walking up
from the smallest tier, the first point where the files seen so far number ``fan_in`` or more is
merged (or, while the files seen so far weigh under ``target // TINY_DIVISOR`` together, the first
point where they number :data:`TINY_FAN_IN`: late trickles into past hours are tiny, so merging them
early costs few bytes and keeps those hours' file counts down); the group then drops, largest first,
any file bigger than the rest of the group together (a live merge never rewrites a file for fewer new
bytes than it holds). Outputs of a tier weigh at
least ``fan_in`` times its smallest file, so they start a tier of their own and wait for peers: each
byte is rewritten about once per ``fan_in``-fold growth while live, never once per commit. Groups
are packed First Fit Decreasing into bins of at most ``target + target // BIN_SLACK_DIVISOR`` bytes.

**Absorb** (settled). Sorted by size, a file joins the group only while it is at most
``min(fan_in, ABSORB_RATIO)`` times the bytes of the smaller files already in it; the first that is
not stops the group (every later file is larger). So a merged 10 MB hour is not rewritten for one late
100 KB file (it waits until late bytes weigh a ``1/ABSORB_RATIO`` share of it), while an hour of tiered
outputs and stragglers merges into one group. When every file under the target joins (``settled_full``), the plan ends the
partition within the excess rule: the group's even split carries at most the best layout's error.

Files at or above the target are never rewritten (they carry no error), nor, once settled, files of at
least half of it.

The constants were chosen with ``python -m benchmarks.policy_sim --trace streaming`` (the trace of
``benchmarks.streaming``, late data into three past hours included), against Iceberg's periodic
bin-pack every 20 commits: write amplification and the mean live file count trade against each other,
and these settings moved that frontier (see the constants' comments).

Pure code: the standard library and :mod:`autooptimize.domain` only; exact integers throughout.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autooptimize.domain.checks import non_negative_int
from autooptimize.domain.entropy import excess_needs_attention
from autooptimize.domain.planning.binpack import BIN_SLACK_DIVISOR, first_fit_decreasing
from autooptimize.domain.planning.essential import MeasuredFiles, check_min_input
from autooptimize.domain.planning.types import Plan, PlanFile
from autooptimize.errors import InvalidArgument

__all__ = [
    "ABSORB_RATIO",
    "DEFAULT_FAN_IN",
    "DEFAULT_SETTLE_SECONDS",
    "LIVE_LARGE_DIVISOR",
    "RULES",
    "SKIP_RULES",
    "TINY_DIVISOR",
    "TINY_FAN_IN",
    "PolicyPlan",
    "capped_bytes",
    "is_live",
    "plan_partition",
]

#: Files of similar size that gather before a live merge. Bigger trades live files for bytes rewritten;
#: with :data:`TINY_FAN_IN` and :data:`ABSORB_RATIO` beside it, 12 gave (policy_sim, the streaming
#: trace, 4 seeds, 8 MiB) write amplification 1.47 with 1.03× the bin-pack's live files, where 8 alone
#: gave 1.62 with 1.06×.
DEFAULT_FAN_IN = 12
#: A live tier merges at this many files while its files weigh under ``target // TINY_DIVISOR`` together.
TINY_FAN_IN = 4
TINY_DIVISOR = 8
#: Settled, a file joins the merge only while at most this many times the bytes of the smaller files
#: already in it (capped by ``fan_in``): a remainder file is rewritten once late bytes weigh a quarter of it.
ABSORB_RATIO = 4
#: A partition with no new file for this long is settled. From the simulation (commits 0.6 s apart):
#: 1.5–6 s change write amplification by < 0.02; 3 s is five commit intervals, so a steady writer
#: keeps its hour live and an hour settles a few seconds after its writes stop.
DEFAULT_SETTLE_SECONDS = 3.0
#: While live, files of at least ``target // LIVE_LARGE_DIVISOR`` bytes are never rewritten.
LIVE_LARGE_DIVISOR = 2
#: Settled, files of at least ``target * DONE_NUMERATOR // DONE_DENOMINATOR`` bytes are done: rewriting a
#: 7.8 MB file with a trickle to reach 8 MiB costs far more than it buys (measured by benchmarks.streaming:
#: that repeated rewrite held write amplification above 2). Half (not Iceberg's three quarters) also
#: leaves an hour's half-target remainder alone while late data trickles in.
DONE_NUMERATOR, DONE_DENOMINATOR = 1, 2

RULES = ("below_excess", "tiered", "live_wait", "settled_full", "settled_partial", "nothing_to_merge")
#: The rules that leave a partition alone: each is the reason it was skipped.
SKIP_RULES = ("below_excess", "live_wait", "nothing_to_merge")


@dataclass(frozen=True, slots=True)
class PolicyPlan:
    """The plan for one partition and the rule that produced it (one of :data:`RULES`).

    ``attention`` is the excess rule's verdict before the plan.
    """

    plan: Plan
    rule: str
    attention: bool

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise InvalidArgument(f"PolicyPlan.rule must be one of {', '.join(RULES)}; got {self.rule!r}")


def is_live(newest_file_age_seconds: float, settle_seconds: float = DEFAULT_SETTLE_SECONDS) -> bool:
    """True while the partition's newest file is younger than ``settle_seconds``."""
    if not newest_file_age_seconds >= 0:
        raise InvalidArgument(f"newest_file_age_seconds must be a number ≥ 0, got {newest_file_age_seconds!r}")
    if not settle_seconds >= 0:
        raise InvalidArgument(f"settle_seconds must be a number ≥ 0, got {settle_seconds!r}")
    return newest_file_age_seconds < settle_seconds


def capped_bytes(sizes: Iterable[int], target: int) -> int:
    """``Σ min(s, target)``: the partition bytes the excess rule takes (see :func:`plan_partition`)."""
    return sum(min(non_negative_int("file size", s), target) for s in sizes)


def _tiers(idxs: Sequence[int], sizes: Sequence[int], fan_in: int) -> list[list[int]]:
    """``idxs`` sorted by size, cut where a file reaches ``fan_in`` times its tier's smallest file."""
    tiers: list[list[int]] = []
    floor = 0
    for i in idxs:
        if not tiers or sizes[i] >= fan_in * floor:
            tiers.append([])
            floor = sizes[i]
        tiers[-1].append(i)
    return tiers


def _live_group(idxs: Sequence[int], sizes: Sequence[int], fan_in: int, target: int) -> list[int]:
    """The smallest tier of ``fan_in`` files with every smaller file (:data:`TINY_FAN_IN` files while they
    weigh under ``target // TINY_DIVISOR``), less any file above the rest's bytes."""
    group: list[int] = []
    total = 0
    for tier in _tiers(idxs, sizes, fan_in):
        group.extend(tier)
        total += sum(map(sizes.__getitem__, tier))
        if len(group) >= (min(fan_in, TINY_FAN_IN) if total < target // TINY_DIVISOR else fan_in):
            break
    else:
        return []
    return _without_outsized(group, sizes)


def _without_outsized(group: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """``group`` less its largest files while one is larger than the rest together (it would be rewritten
    for little): the one rule for a live group and for each bin it is packed into."""
    kept = sorted(group, key=sizes.__getitem__)
    total = sum(map(sizes.__getitem__, kept))
    while kept and 2 * sizes[kept[-1]] > total:
        total -= sizes[kept.pop()]
    return kept


def _absorbed(idxs: Sequence[int], sizes: Sequence[int], fan_in: int) -> list[int]:
    """The ascending prefix of ``idxs`` in which each file is ≤ ``fan_in`` × the bytes before it."""
    group: list[int] = []
    total = 0
    for i in idxs:
        if group and sizes[i] > fan_in * total:
            break
        group.append(i)
        total += sizes[i]
    return group


def plan_partition(
    files: Iterable[PlanFile],
    target: int,
    tolerance: int,
    *,
    live: bool,
    fan_in: int = DEFAULT_FAN_IN,
    min_input_files: int = 2,
) -> PolicyPlan:
    """The policy's plan for one partition's live data files (see the module doc for the rules).

    ``live``: the partition's newest file arrived less than ``settle_seconds`` ago (:func:`is_live`).
    Judged by :func:`~autooptimize.domain.entropy.excess_needs_attention` on ``N``, ``SSE`` and
    ``B = Σ min(s, target)`` (:func:`capped_bytes`): a file over the target counts as the target, so a
    partition whose only error is a remainder beside oversized files is already at its best reachable
    layout (files at or above the target are never rewritten).

    Guarantees: no file is in two groups or absent from ``files``; every group holds at least
    ``min_input_files`` files (a live merge starts only when ``fan_in`` similar files wait, or
    :data:`TINY_FAN_IN` tiny ones); live, no group holds a file of
    ``target // LIVE_LARGE_DIVISOR`` bytes or more, nor a file larger than the rest of its group;
    settled, no group holds a file more than ``fan_in`` times the bytes of its smaller members, and a
    ``settled_full`` plan leaves the partition within the excess rule (under the output model).
    Raises :class:`InvalidArgument` naming the first argument that is not valid.
    """
    measured = MeasuredFiles.checked(files, target, tolerance)
    min_input_files = check_min_input(min_input_files)
    try:
        fan_in = operator.index(fan_in)
    except TypeError:
        fan_in = 0
    if fan_in < min_input_files:
        raise InvalidArgument(f"fan_in must be an integer ≥ min_input_files ({min_input_files}), got {fan_in!r}")
    if not isinstance(live, bool):
        raise InvalidArgument(f"live must be True or False, got {live!r}")
    target, sizes = measured.target, measured.sizes
    bytes_capped = sum(min(s, target) for s in sizes)
    attention = excess_needs_attention(measured.before.sse, measured.before.n, bytes_capped, target,
                                       measured.tolerance)
    if not attention:
        return PolicyPlan(measured.plan(()), "below_excess", False)
    cap = target // LIVE_LARGE_DIVISOR if live else target * DONE_NUMERATOR // DONE_DENOMINATOR
    cand = sorted((i for i, s in enumerate(sizes) if s < cap), key=lambda i: (sizes[i], measured.files[i].path))
    if live:
        group = _live_group(cand, sizes, fan_in, target)
        if not group:
            return PolicyPlan(measured.plan(()), "live_wait", True)
        order = sorted(group, key=sizes.__getitem__, reverse=True)
        bins = first_fit_decreasing(order, sizes, target + target // BIN_SLACK_DIVISOR)
        trimmed = (_without_outsized(b, sizes) for b in bins)  # FFD may pair a file with fewer bytes than it
        chosen = [b for b in trimmed if len(b) >= min_input_files]
        return PolicyPlan(measured.plan(chosen), "tiered" if chosen else "live_wait", True)
    group = _absorbed(cand, sizes, min(fan_in, ABSORB_RATIO))
    if len(group) < min_input_files:
        return PolicyPlan(measured.plan(()), "nothing_to_merge", True)
    # full: every file under the target joined (none left out as done or too large for the group)
    rule = "settled_full" if len(group) == sum(1 for x in sizes if x < target) else "settled_partial"
    return PolicyPlan(measured.plan([group]), rule, True)
