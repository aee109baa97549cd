"""The spans of a table's time partitions as a replay sees them: per spec, the newest and oldest ordinal
(hour, day, month or year) and the late horizon (the most partitions behind the newest that a write has
landed). The simulator's counterpart of the listener's ``ao_spec_spans`` (migration 0016).

Pure: the standard library and :mod:`autooptimize.domain` only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from autooptimize.domain.policy import past_late_horizon

__all__ = ["Spans", "TimePartition", "time_of"]


class TimePartition(NamedTuple):
    """A partition of a spec with a time field (year, month, day or hour), with that field's value: what
    AutoAnalyze's replay keys a table's time partitions by, so the late-horizon finish can be modelled."""

    spec_id: int
    ordinal: int
    key: str


def time_of(part: Hashable) -> tuple[Hashable, int] | None:
    """(its spec, its ordinal) for a time partition (a :class:`TimePartition`, or a bare integer ordinal of
    one unnamed spec); None for any other."""
    if isinstance(part, TimePartition):
        return part.spec_id, part.ordinal
    if isinstance(part, int) and not isinstance(part, bool):
        return None, part
    return None


@dataclass
class Spans:
    """Each spec's ``{"newest", "oldest", "horizon"}``, widened commit by commit (:meth:`extend`)."""

    by_spec: dict[Hashable, dict[str, int]] = field(default_factory=dict)

    def extend(self, parts: Iterable[Hashable]) -> bool:
        """Count one commit's partitions into their spec's span: the newest, the oldest, and the horizon
        (how far behind the newest, after this commit, a file of it landed). True when a spec's newest
        moved on."""
        ordinals_of: dict[Hashable, list[int]] = {}
        for part in parts:
            found = time_of(part)
            if found is not None:
                ordinals_of.setdefault(found[0], []).append(found[1])
        advanced = False
        for spec, ordinals in ordinals_of.items():
            span = self.by_spec.setdefault(spec, {"newest": max(ordinals), "oldest": min(ordinals), "horizon": 0})
            advanced = advanced or max(ordinals) > span["newest"]
            span["newest"] = max(span["newest"], *ordinals)
            span["oldest"] = min(span["oldest"], *ordinals)
            span["horizon"] = max(span["horizon"], *(span["newest"] - o for o in ordinals))
        return advanced

    def past_horizon(self, part: Hashable) -> bool:
        """:func:`~autooptimize.domain.policy.past_late_horizon` for ``part`` (False for a partition with no
        time field, or of a spec not seen yet)."""
        found = time_of(part)
        if found is None or found[0] not in self.by_spec:
            return False
        span = self.by_spec[found[0]]
        return past_late_horizon(found[1], span["newest"], span["oldest"], span["horizon"])

    def is_newest(self, part: Hashable) -> bool:
        """True for the newest time partition of its spec, and for every partition without a time field
        (nothing says it is done being written)."""
        found = time_of(part)
        if found is None or found[0] not in self.by_spec:
            return True
        return self.by_spec[found[0]]["newest"] == found[1]
