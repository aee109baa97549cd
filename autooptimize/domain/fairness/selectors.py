"""One level of fair sharing: selectors that choose among keys by weight (WRR) or by cost (DWRR)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from autooptimize.domain.checks import is_positive_number, positive_number
from autooptimize.errors import InvalidArgument

__all__ = ["DeficitRoundRobin", "Policy", "Selector", "WeightedRoundRobin", "selector_for"]

K = TypeVar("K", bound=Hashable)


def _weight_lookup(
    weights: Mapping[K, float] | Callable[[K], float] | None, default: float
) -> Callable[[K], float]:
    # a mapping is checked once here; a callable is checked per use by the selectors
    if weights is None:
        return lambda key: default
    if callable(weights):
        return weights
    checked = {key: positive_number(f"weight of {key!r}", value) for key, value in weights.items()}
    return lambda key: checked.get(key, default)


class Policy(StrEnum):
    """How keys at one level share: by picks (WRR) or by cost (DWRR)."""

    WRR = "wrr"
    DWRR = "dwrr"


class Selector(Protocol[K]):
    """One level of fair sharing: chooses among keys, each with the cost of its next item.

    ``blocked`` names keys that have work but cannot be served now (e.g. their table is at its
    concurrency limit): they keep their place and are passed over. Keys in neither are idle.
    """

    def peek(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        """The key :meth:`pick` would choose now, without changing any state."""
        ...

    def pick(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        """Choose a key among ``costs`` (key -> cost of its next item) and account for it."""
        ...


class WeightedRoundRobin(Generic[K]):
    """Smooth weighted round robin (the interleaving variant nginx uses); costs are ignored.

    While the set of candidates stays the same and weights are integers, every window of ``W`` picks
    (``W`` = sum of the candidates' weights, counted from the moment the set last changed) serves each
    key exactly its weight times, interleaved rather than in runs. A blocked key keeps its credit but
    earns none; an idle key loses its credit. Keys are considered in the order ``costs`` iterates them;
    ties go to the earlier one.
    """

    def __init__(
        self, weights: Mapping[K, float] | Callable[[K], float] | None = None, default_weight: float = 1.0
    ) -> None:
        self._weight = _weight_lookup(weights, positive_number("default_weight", default_weight))
        self._current: dict[K, float] = {}

    def _decide(self, costs: Mapping[K, float], blocked: Collection[K]) -> tuple[K | None, dict[K, float]]:
        current = {key: self._current[key] for key in blocked if key in self._current}
        total = 0.0
        best: K | None = None
        for key in costs:
            weight = positive_number(f"weight of {key!r}", self._weight(key))
            current[key] = self._current.get(key, 0.0) + weight
            total += weight
            if best is None or current[key] > current[best]:
                best = key
        if best is not None:
            current[best] -= total
        return best, current

    def peek(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        return self._decide(costs, blocked)[0]

    def pick(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        key, self._current = self._decide(costs, blocked)
        return key


class DeficitRoundRobin(Generic[K]):
    """Deficit weighted round robin (Shreedhar and Varghese): shares *cost*, e.g. bytes or items.

    Keys take turns in a ring. At the start of its turn a key earns ``quantum x weight`` credit and is
    served while its credit covers the cost of its next item; then the turn passes on. A blocked key
    keeps its place but is passed over; if it was its turn, the turn ends and its credit is dropped. An idle key
    (neither offered nor blocked) leaves the ring and loses its credit; when it comes back it joins the
    tail, so nothing is banked while idle and a returning key waits at most one round. While a set of
    keys stays backlogged and unblocked, the cost served to each differs from its weighted share by
    less than ``quantum x weight + max cost``; with unit costs and integer ``quantum x weight`` a turn
    serves exactly ``quantum x weight`` items.
    """

    def __init__(
        self,
        weights: Mapping[K, float] | Callable[[K], float] | None = None,
        quantum: float = 1.0,
        default_weight: float = 1.0,
    ) -> None:
        self._weight = _weight_lookup(weights, positive_number("default_weight", default_weight))
        self._quantum = positive_number("quantum", quantum)
        self._ring: list[K] = []  # backlogged keys in turn order; the turn is at self._head
        self._members: set[K] = set()
        self._head = 0
        self._deficit: dict[K, float] = {}
        self._credited = False  # the key whose turn it is has had its credit for this turn

    def quantum_of(self, key: K) -> float:
        """Credit ``key`` earns per turn: quantum x weight."""
        weight = self._weight(key)
        quantum = self._quantum * weight if is_positive_number(weight) else math.nan
        if not is_positive_number(quantum):
            raise InvalidArgument(f"weight of {key!r} must be a positive finite number, got {weight!r}")
        return quantum

    def _sync(self, costs: Mapping[K, float], blocked: Collection[K]) -> tuple[list[K], int, bool] | None:
        """The ring without idle keys and with new ones at the tail, or None when the members are unchanged."""
        if not blocked and costs.keys() == self._members:
            return None
        members = set(costs).union(blocked)
        if members == self._members:
            return None
        rotated = self._ring[self._head:] + self._ring[:self._head]
        ring = [key for key in rotated if key in members]
        credited = self._credited and bool(ring) and ring[0] == rotated[0]
        present = set(ring)
        for key in (*costs, *blocked):
            if key not in present:
                ring.append(key)
                present.add(key)
        return ring, 0, credited

    def _decide(
        self, costs: Mapping[K, float], blocked: Collection[K]
    ) -> tuple[K | None, tuple[list[K], int, bool] | None, int, dict[K, float]]:
        """(chosen, new ring or None, new head, deficit changes); changes nothing."""
        synced = self._sync(costs, blocked)
        ring, head, credited = synced if synced is not None else (self._ring, self._head, self._credited)
        if not costs:
            return None, synced, head, {}
        changes: dict[K, float] = {}

        def deficit(key: K) -> float:
            # self._deficit only holds keys of the committed ring, so a new key starts from 0
            return changes[key] if key in changes else self._deficit.get(key, 0.0)

        def cost(key: K) -> float:
            value = costs[key]
            if not is_positive_number(value):
                raise InvalidArgument(f"cost of {key!r} must be a positive finite number, got {value!r}")
            return value

        def next_turn(position: int) -> int:
            """Pass the turn to the next unblocked key and credit it."""
            position = (position + 1) % len(ring)
            while ring[position] not in costs:
                position = (position + 1) % len(ring)
            changes[ring[position]] = deficit(ring[position]) + self.quantum_of(ring[position])
            return position

        if ring[head] not in costs:
            # The key whose turn it was is blocked: its turn ends and its unused credit is dropped, so
            # a key that stays at its capacity limit cannot bank credit for a burst later.
            changes[ring[head]] = 0.0
            head = next_turn(head)
        elif not credited:
            changes[ring[head]] = deficit(ring[head]) + self.quantum_of(ring[head])
        misses = 0
        while deficit(ring[head]) < cost(ring[head]):
            head = next_turn(head)
            misses += 1
            if misses == len(costs):
                # A whole round served nothing (costs far above quanta): credit the rounds in one step.
                rounds = min(math.ceil((cost(k) - deficit(k)) / self.quantum_of(k)) for k in costs) - 1
                if rounds > 0:
                    for key in costs:
                        changes[key] = deficit(key) + rounds * self.quantum_of(key)
                misses = 0
        chosen = ring[head]
        changes[chosen] = deficit(chosen) - cost(chosen)
        return chosen, synced, head, changes

    def peek(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        return self._decide(costs, blocked)[0]

    def pick(self, costs: Mapping[K, float], blocked: Collection[K] = ()) -> K | None:
        chosen, synced, head, changes = self._decide(costs, blocked)
        if synced is not None:
            self._ring = synced[0]
            self._members = set(self._ring)
            self._deficit = {key: self._deficit[key] for key in self._ring if key in self._deficit}
        self._deficit.update(changes)
        self._head = head
        if synced is not None or chosen is not None:
            self._credited = chosen is not None or (synced is not None and synced[2])
        return chosen


def selector_for(policy: Policy, weights: Callable[[str], float], quantum: float) -> Selector[str]:
    """A fresh selector of ``policy`` over string keys (``quantum`` only matters for DWRR)."""
    if policy is Policy.WRR:
        return WeightedRoundRobin(weights)
    return DeficitRoundRobin(weights, quantum)
