"""The cost model and the budget's ranking: what a candidate is worth, what it will cost, which go first.

**Value** of a planned action, in file equivalents::

    value = files removed + files rewritten × (√MSE_before − √MSE_after) / target

Files removed are the data files (and, for delete compaction, the delete files) the action takes out
of the partition; the second term is the RMS distance from the target it closes (in units of the
target) for every file it touches, so a sort or z-order that removes few files is still worth something.

**Cost** in core-seconds (one core busy for one second), from the table's own finished actions::

    prior(files, bytes) = per_action + per_file × files + per_gib × bytes / 2³⁰
    scale = (Σ measured + w × p̄) / (Σ predicted + w × p̄)     (p̄: the mean predicted, w = PRIOR_WEIGHT)
    cost = prior(files, bytes) × scale

i.e. the shape of the prior, scaled by the ratio of what the table's last actions really cost to what
the prior said they would, shrunk towards 1 (the prior) by ``PRIOR_WEIGHT`` pseudo-actions so that one
odd action does not swing every estimate. An action's measured core-seconds are
:func:`core_seconds` of its ``timings``.

**Ranking** (:func:`rank`): candidates in order of value per core-second (ties: the earlier arrival,
then the key), each admitted when its cost fits what is left of the budget; one that does not fit is
deferred and the next is tried (greedy by ratio, the usual answer to a knapsack of many small items).

**Pacing.** An estimate can be wrong (the same action's CPU seconds vary with the machine's load),
and a budget that admitted all it could afford on estimates at once would overspend by that error. So
while admitted actions are in flight, their estimates may hold at most a fraction ``pace`` of what the
*measured* spend leaves of the hour; the rest is admitted at later ticks, once they have finished and
count at their measured cost. With nothing in flight, the next candidate is admitted when its estimate
with a ``margin`` (1 + margin times) fits what is left, however large, so that the hour can be used to
its end. The budget then holds while the estimates err by less than min(margin, (1 − pace) / pace).
Pacing keeps the ranking's order: the first candidate it holds back stops the tick's admissions
(``paced``), so nothing of less value per core-second overtakes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autooptimize.domain.decision import PartitionFacts
from autooptimize.errors import InvalidArgument

GIB = 1 << 30
#: How many actions the prior counts for when the table's measured history is blended in.
PRIOR_WEIGHT = 2.0
#: The newest finished actions of a table the model learns from.
HISTORY = 20

ADMIT, DEFER, PENDING = "admit", "defer", "pending"
#: Reason codes of a verdict.
REASONS = {
    "ranked": "admitted: its value per core-second ranked within what the budget had left",
    "over_budget": "deferred: what is left of the hour's budget is spent on candidates of more value per "
                   "core-second; judged again at every tick",
    "larger_than_budget": "deferred: its estimate alone exceeds the hourly budget; raise "
                          "AO_BUDGET_CORE_SECONDS_PER_HOUR for it to ever run",
    "no_value": "deferred: it removes no file and closes no distance from the target",
    "paced": "deferred: estimates already in flight hold AO_BUDGET_PACE of what the measured spend leaves "
             "of the hour; admitted at a later tick, once they have finished and been measured",
}


def _non_negative(name: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name} must be a finite number ≥ 0 (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class CostPrior:
    """Core-seconds of an action before the table has any history: a fixed part, per input file, per GiB."""

    per_action: float
    per_file: float
    per_gib: float

    def __post_init__(self) -> None:
        for name in ("per_action", "per_file", "per_gib"):
            _non_negative(f"cost prior {name}", getattr(self, name))
        if self.per_action + self.per_file + self.per_gib <= 0:
            raise InvalidArgument("cost prior: at least one of per_action, per_file, per_gib must be > 0")

    def estimate(self, files: int, bytes_: int) -> float:
        return self.per_action + self.per_file * files + self.per_gib * bytes_ / GIB


@dataclass(frozen=True)
class Sample:
    """One finished action: its input files and bytes, and the core-seconds it measured."""

    files: int
    bytes: int
    core_seconds: float


@dataclass(frozen=True)
class CostModel:
    """The prior scaled by what the table's history measured (``scale`` 1.0: the prior alone)."""

    prior: CostPrior
    scale: float = 1.0
    samples: int = 0

    @classmethod
    def learn(cls, prior: CostPrior, history: Iterable[Sample]) -> CostModel:
        kept = [s for s in history if s.core_seconds > 0 and math.isfinite(s.core_seconds)]
        if not kept:
            return cls(prior)
        predicted = [prior.estimate(s.files, s.bytes) for s in kept]
        measured = sum(s.core_seconds for s in kept)
        mean = sum(predicted) / len(predicted)
        scale = (measured + PRIOR_WEIGHT * mean) / (sum(predicted) + PRIOR_WEIGHT * mean)
        return cls(prior, scale, len(kept))

    def estimate(self, files: int, bytes_: int) -> float:
        """Estimated core-seconds of an action reading ``files`` files of ``bytes_`` bytes."""
        return self.prior.estimate(files, bytes_) * self.scale

    def as_dict(self) -> dict[str, float | int]:
        return {"per_action": self.prior.per_action, "per_file": self.prior.per_file,
                "per_gib": self.prior.per_gib, "scale": round(self.scale, 4), "samples": self.samples}


def core_seconds(timings: Mapping[str, float] | None) -> float | None:
    """Core-seconds an action spent: the worker process's CPU seconds (``cpu``) plus its Spark tasks'
    CPU seconds on the executors (``task.cpu``: their Python workers'; before that was measured, the
    tasks' wall seconds ``task.wall``, one core each). CPU seconds, not wall: the machine's other load
    stretches wall time and would make the same action cost more from one hour to the next. An action
    recorded before ``cpu`` was measured counts its wall seconds as one core; None when nothing was
    measured."""
    if not timings:
        return None
    executors = float(timings["task.cpu"] if "task.cpu" in timings else timings.get("task.wall", 0.0))
    if "cpu" in timings:
        return float(timings["cpu"]) + executors
    if "wall" in timings:
        return max(float(timings["wall"]), executors)
    return None


@dataclass(frozen=True)
class Worth:
    """What a planned action removes and how much it reads (the cost model's inputs)."""

    files_removed: int
    distance_closed: float  # files rewritten × (√MSE_before − √MSE_after) / target
    files_in: int
    bytes_in: int

    @property
    def value(self) -> float:
        return self.files_removed + self.distance_closed


def _closed(files_in: int, mse_before: float, mse_after: float, target: int | None) -> float:
    if not target:
        return 0.0
    return files_in * max(0.0, math.sqrt(max(mse_before, 0.0)) - math.sqrt(max(mse_after, 0.0))) / target


def worth_of(facts: PartitionFacts, kind: str) -> Worth | None:
    """The worth of action ``kind`` as decide planned it on ``facts`` (None: decide planned no such action)."""
    if kind == "merge" and facts.merge is not None:
        m = facts.merge
        return Worth(max(0, m.files_in - m.files_out), _closed(m.files_in, m.mse_before, m.mse_after, facts.target),
                     m.files_in, m.bytes_rewritten)
    if kind in ("sort", "zorder"):
        s = facts.sort if kind == "sort" else facts.zorder
        if s is None:
            return None
        return Worth(max(0, s.files_in - s.files_out), _closed(s.files_in, facts.mse, s.mse_after, facts.target),
                     s.files_in, s.bytes_rewritten)
    if kind == "compact_deletes" and facts.deletes.files:
        d = facts.deletes
        out = max(1, -(-facts.bytes // facts.target)) if facts.target else facts.files
        # every delete file goes, and the data files it applies to are rewritten at the target size
        return Worth(d.files + max(0, facts.files - out), 0.0, facts.files + d.files,
                     (d.data_bytes_affected or facts.bytes) + d.bytes)
    return None


@dataclass(frozen=True)
class BudgetCandidate:
    """A candidate competing for the budget: its key (any stable, unique text), value, estimated cost
    (core-seconds) and arrival order."""

    key: str
    value: float
    cost: float
    arrived: float = 0.0

    def __post_init__(self) -> None:
        _non_negative(f"value of {self.key}", self.value)
        _non_negative(f"cost of {self.key}", self.cost)

    @property
    def value_per_cost(self) -> float:
        return self.value / self.cost if self.cost > 0 else (math.inf if self.value > 0 else 0.0)


@dataclass(frozen=True)
class Verdict:
    key: str
    verdict: str  # ADMIT or DEFER
    reason: str  # a key of REASONS


def rank(candidates: Sequence[BudgetCandidate], remaining: float, budget: float, *, pace: float = 1.0,
         in_flight: float = 0.0, margin: float = 0.0) -> list[Verdict]:
    """Verdicts for ``candidates`` when ``remaining`` core-seconds are left of an hourly ``budget`` (the
    spend counting ``in_flight``, the estimates of admitted actions not yet finished): in order of value
    per core-second, each admitted when it fits what is left, the pace and the margin (see module doc).
    Every candidate gets exactly one verdict, in ranking order."""
    _non_negative("budget", budget)
    _non_negative("in-flight estimate", in_flight)
    _non_negative("margin", margin)
    if not isinstance(pace, int | float) or not 0 < pace <= 1:
        raise InvalidArgument(f"pace must be in (0, 1] (got {pace!r})")
    keys = [c.key for c in candidates]
    if len(set(keys)) != len(keys):
        raise InvalidArgument(f"candidate keys must be unique (repeated: {sorted({k for k in keys if keys.count(k) > 1})})")
    left = max(0.0, remaining)
    flight = in_flight  # estimates in flight, this tick's admissions included
    allowance = pace * (left + in_flight)  # the most estimates may hold of what the measured spend leaves
    paced = False
    verdicts = []
    for c in sorted(candidates, key=lambda c: (-c.value_per_cost, c.arrived, c.key)):
        if c.value <= 0:
            verdicts.append(Verdict(c.key, DEFER, "no_value"))
        elif c.cost > budget:
            verdicts.append(Verdict(c.key, DEFER, "larger_than_budget"))
        elif c.cost > left or (flight == 0 and c.cost * (1 + margin) > left):
            verdicts.append(Verdict(c.key, DEFER, "over_budget"))
        elif paced or (flight > 0 and flight + c.cost > allowance):
            paced = True  # the order holds: nothing of less value per core-second goes before it
            verdicts.append(Verdict(c.key, DEFER, "paced"))
        else:
            left -= c.cost
            flight += c.cost
            verdicts.append(Verdict(c.key, ADMIT, "ranked"))
    return verdicts
