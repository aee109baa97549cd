"""Merge policy for partitions that are still being written: tiered while written, finished once cold.

A partition is **cold** once no file has arrived for its cold-after time (the caller decides, with
:func:`partition_cold_after`: the table's ``cold_after_seconds``, or sooner when the partition's own
writes came close together; or at once for a time partition past its table's late horizon,
:func:`past_late_horizon`); until then it is written to (live, or quiet between writes: the same
rules). Its **scale** is the bytes it holds or is expected to hold, at most the target (:func:`partition_scale`): the table's history of
partition volumes tells a 10 MB hour at a 128 MiB target from a 2 GB one, and the tiers are cut
against that scale, not the target. The rules, named in :attr:`PolicyPlan.rule` so ``explain`` can
show which one applied:

``below_excess``      the partition is within the excess rule
                      (:func:`~autooptimize.domain.entropy.excess_needs_attention`): nothing to do
``left_alone``        its bytes are under the table's ``leave_alone_below``: never merged
``tiered``            written to: the smallest files merge once ``fan_in`` of similar size have gathered
                      (:data:`TINY_FAN_IN` while they weigh under ``scale // TINY_DIVISOR`` together)
``live_wait``         written to, over the excess rule, but no tier holds ``fan_in`` files yet
``quiet_full``        quiet (``quiet_merge`` on, no write for ``settle_seconds``, not cold): every file
                      under the target merges into one group (an even split)
``quiet_partial``     quiet: the small files merge, the largest stay (see *absorb* below)
``cold_finish``       cold: every file under ¾ of the target merges once into the best layout its
                      bytes allow (an even split of ``round(B / target)`` files); the plan reports
                      the bytes that costs
``cold_absorb``       the cold finish with ``cold_absorb`` on, when it would leave one file under ¾: it
                      takes a nearly full file as well (:mod:`autooptimize.domain.remainder`)
``nothing_to_merge``  cold and over the excess rule, but fewer than ``min_input_files`` files can merge
``filled``, ``priced``, ``priced_wait``
                      written to, at a ``price`` > 0 (the default; 0: the tiers), in a partition whose scale is
                      the target: the priced rule of :mod:`autooptimize.domain.priced`, in place of the
                      tiers and quiet merging

**Tiers.** Files under ``scale // LIVE_LARGE_DIVISOR`` are sorted by size and cut into tiers: a tier
starts at its smallest file and holds every file under ``fan_in`` times that size. Walking up from the
smallest tier, the first point where the files seen so far number ``fan_in`` or more is merged (or,
while they weigh under ``scale // TINY_DIVISOR`` together, :data:`TINY_FAN_IN`: late trickles are tiny
against their hour, so merging them early costs few bytes); the group then drops, largest first, any
file bigger than the rest of the group together. Outputs of a tier weigh at least ``fan_in`` times its
smallest file, so they start a tier of their own: each byte is rewritten about once per
``fan_in``-fold growth while written to, never once per commit, and a file of half the partition's
scale waits for the cold finish. Groups are packed First Fit Decreasing into bins of at most
``target + target // BIN_SLACK_DIVISOR`` bytes.

**Absorb** (quiet, only with ``quiet_merge``). Sorted by size, a file under half the target joins the
group only while it is at most ``min(fan_in, ABSORB_RATIO)`` times the bytes of the smaller files already
in it: a merged hour is not rewritten for one late file, only once late bytes weigh a quarter of it. It
keeps fewer files between late writes at the price of more bytes rewritten (the policy before issue 25,
with the cold finish after it); AutoAnalyze turns it on where the table's history says it pays.

**Cold.** One merge of everything small, once: a late file after that makes the partition live again,
and it is finished again when it next goes cold. Files at or above ¾ of the target are never rewritten.

The constants were chosen with ``python -m benchmarks.policy_sim`` over the whole trace family of
``benchmarks.trace_family`` (targets 8–512 MiB, hourly and daily partitions, 1 MB–2 GB per
partition-hour, late shares 0–35 %, 0.2–5 commits/s) against Iceberg's blocking bin-pack every 20
writes; docs/policy.md has the table, and what no setting of them reaches.

Pure code: the standard library and :mod:`autooptimize.domain` only; exact integers throughout.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autooptimize.domain.checks import non_negative_int
from autooptimize.domain.entropy import excess_needs_attention
from autooptimize.domain.planning.binpack import BIN_SLACK_DIVISOR, first_fit_decreasing
from autooptimize.domain.planning.essential import MeasuredFiles, check_min_input
from autooptimize.domain.planning.types import Plan, PlanFile
from autooptimize.domain.policy_clock import (
    COLD_FLOOR_SECONDS,
    COLD_GAPS_KEPT,
    DEFAULT_COLD_AFTER_SECONDS,
    DEFAULT_COLD_GAP_FACTOR,
    DEFAULT_SETTLE_SECONDS,
    HORIZON_SPAN_MARGIN,
    is_live,
    partition_cold_after,
    past_late_horizon,
)
from autooptimize.domain.priced import DEFAULT_PRICE, PRICED_RULES, priced_group
from autooptimize.domain.remainder import DEFAULT_COLD_ABSORB, remainder_home
from autooptimize.errors import InvalidArgument

__all__ = [
    "expected_partition_bytes", "sorted_median", "COLD_DONE_DENOMINATOR", "COLD_DONE_NUMERATOR",
    "DEFAULT_COLD_AFTER_SECONDS", "ABSORB_RATIO", "DEFAULT_FAN_IN", "DEFAULT_QUIET_MERGE", "DEFAULT_SETTLE_SECONDS",
    "LIVE_LARGE_DIVISOR", "LIVE_MERGE_RULES", "RULES", "SKIP_RULES", "TINY_DIVISOR", "TINY_FAN_IN", "WAIT_RULES",
    "PolicyPlan", "PolicyTuning", "COLD_FLOOR_SECONDS", "COLD_GAPS_KEPT", "HORIZON_SPAN_MARGIN",
    "DEFAULT_COLD_GAP_FACTOR", "capped_bytes", "is_live", "partition_cold_after", "partition_scale",
    "past_late_horizon", "plan_partition"
]

#: Files of similar size that gather before a merge while the partition is written to. Bigger trades
#: live files for bytes rewritten. 12 until 2026-11-29 (least summed shortfall over the family's members
#: in policy_sim). 10 since (session 36): once the service followed its replay at 128 MiB, 12 kept 1.10–
#: 1.12× the bin-pack's live files on a 10 MB hour there and 10 kept 0.99× (WA 3.03 against 2.59; the
#: bin-pack's 7.08); over 80 workloads not tuned on (benchmarks.policy_seeds) 10 holds the file goal on 69
#: against 56 at 1.3 % more bytes; the live-ingest benchmark at 8 MiB keeps both goals (0.99×, WA 1.46).
DEFAULT_FAN_IN = 10
#: A tier merges at this many files while its files weigh under ``scale // TINY_DIVISOR`` together.
TINY_FAN_IN = 4
TINY_DIVISOR = 8
#: While written to, files of at least ``scale // LIVE_LARGE_DIVISOR`` bytes are never rewritten.
LIVE_LARGE_DIVISOR = 2
#: Quiet (``quiet_merge``), a file joins the merge only while at most this many times the bytes of the
#: smaller files already in it (capped by ``fan_in``): a remainder file is rewritten once late bytes weigh
#: a quarter of it.
ABSORB_RATIO = 4
#: Quiet, files of at least ``target * DONE_NUMERATOR // DONE_DENOMINATOR`` bytes are left alone.
DONE_NUMERATOR, DONE_DENOMINATOR = 1, 2
#: Whether a partition that is quiet (no write for ``settle_seconds``) but not yet cold merges its small
#: files (the rules of the policy before issue 25): fewer live files between late writes, more bytes.
DEFAULT_QUIET_MERGE = False
#: Cold, files under this share of the target are merged into the best layout (Iceberg's bin-pack rule,
#: so the end layout is the bin-pack's).
COLD_DONE_NUMERATOR, COLD_DONE_DENOMINATOR = 3, 4

RULES = ("below_excess", "left_alone", "tiered", "live_wait", "quiet_full", "quiet_partial", "cold_finish",
         "cold_absorb", "nothing_to_merge", *PRICED_RULES)
#: The rules that leave a partition alone: each is the reason it was skipped.
SKIP_RULES = ("below_excess", "left_alone", "live_wait", "nothing_to_merge", "priced_wait")
#: The rules that leave a partition alone only while it is written to: judged again once quiet or cold.
WAIT_RULES = ("live_wait", "priced_wait")
#: The rules that merge a partition while it is written to (not cold, not quiet).
LIVE_MERGE_RULES = ("tiered", "filled", "priced")


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


@dataclass(frozen=True, slots=True)
class PolicyTuning:
    """One table's merge tuning: what ``whatif --suggest`` searches over and ``track --auto-tune`` applies.

    ``leave_alone_below``: a partition whose bytes (capped at the target) are under this is never merged
    (0: every partition is merged). ``tolerance`` defaults to a quarter of the target.
    """

    target: int
    fan_in: int = DEFAULT_FAN_IN
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    cold_after_seconds: float = DEFAULT_COLD_AFTER_SECONDS
    leave_alone_below: int = 0
    tolerance: int = -1
    quiet_merge: bool = DEFAULT_QUIET_MERGE
    cold_gap_factor: float = DEFAULT_COLD_GAP_FACTOR
    late_horizon: bool = True  # finish a time partition past the table's late horizon (past_late_horizon)
    price: int = DEFAULT_PRICE  # the priced live rule (autooptimize.domain.priced) at this price; 0: the tiers
    cold_absorb: bool = DEFAULT_COLD_ABSORB  # the cold finish gives its remainder a home (domain.remainder)

    def __post_init__(self) -> None:
        if not isinstance(self.target, int) or self.target < 1:
            raise InvalidArgument(f"PolicyTuning.target must be a positive number of bytes, got {self.target!r}")
        if not isinstance(self.fan_in, int) or self.fan_in < 2:
            raise InvalidArgument(f"PolicyTuning.fan_in must be an integer ≥ 2, got {self.fan_in!r}")
        if not self.settle_seconds >= 0:
            raise InvalidArgument(f"PolicyTuning.settle_seconds must be ≥ 0, got {self.settle_seconds!r}")
        if not self.cold_after_seconds >= self.settle_seconds:
            raise InvalidArgument(f"PolicyTuning.cold_after_seconds must be ≥ settle_seconds "
                                  f"({self.settle_seconds}), got {self.cold_after_seconds!r}")
        if not isinstance(self.leave_alone_below, int) or self.leave_alone_below < 0:
            raise InvalidArgument(f"PolicyTuning.leave_alone_below must be bytes ≥ 0, got {self.leave_alone_below!r}")
        if self.tolerance == -1:
            object.__setattr__(self, "tolerance", self.target // 4)
        elif not isinstance(self.tolerance, int) or self.tolerance < 0:
            raise InvalidArgument(f"PolicyTuning.tolerance must be bytes ≥ 0, got {self.tolerance!r}")
        for name in ("quiet_merge", "late_horizon", "cold_absorb"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"PolicyTuning.{name} must be True or False, got {getattr(self, name)!r}")
        if not self.cold_gap_factor >= 0:
            raise InvalidArgument(f"PolicyTuning.cold_gap_factor must be ≥ 0 (0: off), got {self.cold_gap_factor!r}")
        if not isinstance(self.price, int) or isinstance(self.price, bool) or self.price < 0:
            raise InvalidArgument(f"PolicyTuning.price must be an integer ≥ 0 (0: the tiers), got {self.price!r}")

    def cold_after(self, gaps: Sequence[float] | None) -> float:
        """One partition's cold-after time under this tuning (:func:`partition_cold_after`)."""
        return partition_cold_after(self.cold_after_seconds, gaps, self.cold_gap_factor, self.settle_seconds)

    def as_dict(self) -> dict[str, float | bool]:
        return {"target": self.target, "fan_in": self.fan_in, "settle_seconds": self.settle_seconds,
                "cold_after_seconds": self.cold_after_seconds, "leave_alone_below": self.leave_alone_below,
                "tolerance": self.tolerance, "quiet_merge": self.quiet_merge,
                "cold_gap_factor": self.cold_gap_factor, "late_horizon": self.late_horizon, "price": self.price,
                "cold_absorb": self.cold_absorb}


def expected_partition_bytes(others: Sequence[int], target: int) -> int | None:
    """What a partition of a table is expected to hold, from the bytes of the table's other partitions: the
    median of those that hold a target's bytes or more when any do, else the median of all (None: no other
    partition). Hours that only late data reached (older than the writer's first hour) and a table's young
    hours are not what its partitions grow to; counting them put the first hours of a stream under the
    tiers and their late-only neighbours under the tiers' slower merges (docs/policy-history.md, "The
    expected bytes of a partition"). The median is PostgreSQL's ``percentile_cont(0.5)``: the mean of the
    two middle values, as an integer."""
    full = sorted(b for b in others if b >= target)
    return sorted_median(full) if full else sorted_median(sorted(others))


def sorted_median(ordered: Sequence[int], skip: int | None = None) -> int | None:
    """PostgreSQL's ``percentile_cont(0.5)`` of sorted ``ordered`` less one occurrence of ``skip`` (which it
    holds; None: none), without copying: the middle one, or the mean of the two middle ones, as an integer;
    None when nothing is left."""
    i = len(ordered) if skip is None else bisect.bisect_left(ordered, skip)
    rest = len(ordered) - (skip is not None)
    if rest <= 0:
        return None

    def at(j: int) -> int:  # the j-th of the rest
        return ordered[j if j < i else j + 1]
    return at(rest // 2) if rest % 2 else int((at(rest // 2 - 1) + at(rest // 2)) / 2)


def partition_scale(target: int, received_bytes: int | None, expected_bytes: int | None) -> int:
    """The bytes a partition's layout is judged against: what it holds or is expected to hold, at most
    the target (a partition of 10 MB at a 128 MiB target ends as one 10 MB file, not a 128 MiB one)."""
    return max(1, min(target, max(received_bytes or 0, expected_bytes or 0) or target))


def plan_partition(
    files: Iterable[PlanFile],
    target: int,
    tolerance: int,
    *,
    cold: bool,
    quiet: bool = False,
    fan_in: int = DEFAULT_FAN_IN,
    min_input_files: int = 2,
    received_bytes: int | None = None,
    expected_bytes: int | None = None,
    leave_alone_below: int = 0,
    price: int = 0,
    newest: bool = True,
    cold_absorb: bool = False,
) -> PolicyPlan:
    """The policy's plan for one partition's live data files (see the module doc for the rules).

    ``cold``: no file arrived for the table's ``cold_after_seconds``; ``quiet``: none for its
    ``settle_seconds`` and the table merges quiet partitions (``quiet_merge``; ignored when cold).
    ``received_bytes`` / ``expected_bytes``: the bytes the partition has received in all and the bytes
    the table's history says it will hold (None: unknown); they set the partition's scale
    (:func:`partition_scale`). Judged by :func:`~autooptimize.domain.entropy.excess_needs_attention`
    on ``N``, ``SSE`` and ``B = Σ min(s, target)`` (:func:`capped_bytes`). ``price`` > 0: while written
    to, a partition whose scale is the target follows the priced rule (:mod:`autooptimize.domain.priced`;
    ``newest``: the partition is its spec's newest time partition, or has no time field). ``cold_absorb``:
    a cold finish that would leave one file under ¾ of the target takes a nearly full file too.

    Guarantees: no file is in two groups or absent from ``files``; every group holds at least
    ``min_input_files`` files; no group holds a file at or above the target; not cold and under the
    tiers, no group holds a file of ``scale // LIVE_LARGE_DIVISOR`` bytes or more, nor a file larger than
    the rest of its group (under the priced rule, none of ¾ of the target or more);
    a ``cold_finish`` plan leaves at most one file under ¾ of the target (under the output model), the
    layout Iceberg's bin-pack ends with; a ``cold_absorb`` plan none, when a file under the target fits.
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
    if not isinstance(cold, bool):
        raise InvalidArgument(f"cold must be True or False, got {cold!r}")
    if not isinstance(quiet, bool):
        raise InvalidArgument(f"quiet must be True or False, got {quiet!r}")
    for name, value in (("received_bytes", received_bytes), ("expected_bytes", expected_bytes)):
        if value is not None:
            non_negative_int(name, value)
    leave_alone_below = non_negative_int("leave_alone_below", leave_alone_below)
    price = non_negative_int("price", price)
    for name, flag in (("newest", newest), ("cold_absorb", cold_absorb)):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name} must be True or False, got {flag!r}")
    target, sizes = measured.target, measured.sizes
    bytes_capped = sum(min(s, target) for s in sizes)
    attention = excess_needs_attention(measured.before.sse, measured.before.n, bytes_capped, target,
                                       measured.tolerance)
    if not attention:
        return PolicyPlan(measured.plan(()), "below_excess", False)
    if bytes_capped < leave_alone_below:
        return PolicyPlan(measured.plan(()), "left_alone", True)
    by_size = sorted(range(len(sizes)), key=lambda i: (sizes[i], measured.files[i].path))
    if cold:
        cold_done = target * COLD_DONE_NUMERATOR // COLD_DONE_DENOMINATOR
        group = [i for i in by_size if sizes[i] < cold_done]
        home = remainder_home(group, by_size, sizes, target, cold_done) if cold_absorb else None
        group = group if home is None else [*group, home]
        if len(group) < min_input_files:
            return PolicyPlan(measured.plan(()), "nothing_to_merge", True)
        return PolicyPlan(measured.plan([group]), "cold_finish" if home is None else "cold_absorb", True)
    scale = partition_scale(target, received_bytes, expected_bytes)
    if price and scale >= target:
        group, rule = priced_group(sizes, by_size, target, price, newest,
                                   out_sizes=[f.rewritten_size for f in measured.files])
        chosen = [group] if len(group) >= min_input_files else []
        return PolicyPlan(measured.plan(chosen), rule if chosen or not group else "priced_wait", True)
    if quiet:
        cap = target * DONE_NUMERATOR // DONE_DENOMINATOR
        group = _absorbed([i for i in by_size if sizes[i] < cap], sizes, min(fan_in, ABSORB_RATIO))
        if len(group) < min_input_files:  # wait for more, or for the cold finish
            return PolicyPlan(measured.plan(()), "live_wait", True)
        full = len(group) == sum(1 for x in sizes if x < target)
        return PolicyPlan(measured.plan([group]), "quiet_full" if full else "quiet_partial", True)
    cand = [i for i in by_size if sizes[i] < scale // LIVE_LARGE_DIVISOR]
    group = _live_group(cand, sizes, fan_in, scale)
    if not group:
        return PolicyPlan(measured.plan(()), "live_wait", True)
    order = sorted(group, key=sizes.__getitem__, reverse=True)
    bins = first_fit_decreasing(order, sizes, target + target // BIN_SLACK_DIVISOR)
    trimmed = (_without_outsized(b, sizes) for b in bins)  # FFD may pair a file with fewer bytes than it
    chosen = [b for b in trimmed if len(b) >= min_input_files]
    return PolicyPlan(measured.plan(chosen), "tiered" if chosen else "live_wait", True)
