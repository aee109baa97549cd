"""When to consolidate a table's buffer (Adobe's Flux rules), as pure logic.

Rules of a table, each optional except the age:

- ``max_age``: the oldest buffered file has waited this long → consolidate, whatever its size (data
  never waits longer than this for want of company).
- ``max_bytes``: the buffer holds at least this many bytes → consolidate; also the most one batch takes.
- ``max_files``: the buffer holds at least this many files → consolidate, but only once it also holds
  ``min_bytes`` (many tiny files alone are not worth a commit before their age is up); also the most
  files one batch takes.
- ``combinable``: one batch may take files of every partition (one commit for all of them); when False,
  a batch takes the files of one partition only.
"""

from __future__ import annotations

from dataclasses import dataclass

from autooptimize.errors import InvalidArgument


@dataclass(frozen=True)
class BufferRules:
    """A table's consolidation rules (see the module doc); invalid values raise :class:`InvalidArgument`."""

    max_age_seconds: int
    min_bytes: int = 0
    max_bytes: int | None = None
    max_files: int | None = None
    combinable: bool = True

    def __post_init__(self) -> None:
        if self.max_age_seconds <= 0:
            raise InvalidArgument(f"max_age_seconds must be > 0 (got {self.max_age_seconds})")
        if self.min_bytes < 0:
            raise InvalidArgument(f"min_bytes must be ≥ 0 (got {self.min_bytes})")
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise InvalidArgument(f"max_bytes must be > 0 (got {self.max_bytes})")
        if self.max_files is not None and self.max_files <= 0:
            raise InvalidArgument(f"max_files must be > 0 (got {self.max_files})")
        if self.max_bytes is not None and self.max_bytes < self.min_bytes:
            raise InvalidArgument(f"max_bytes ({self.max_bytes}) is below min_bytes ({self.min_bytes})")


@dataclass(frozen=True)
class BufferLevel:
    """What a table's buffer holds now (files waiting for a batch)."""

    files: int
    bytes: int
    oldest_age_seconds: float | None  # None when empty


@dataclass(frozen=True)
class FlushDecision:
    fire: bool
    rule: str | None  # the rule that fires now: max_age | max_bytes | max_files
    next_rule: str | None  # the rule expected to fire next when none fires now
    seconds_to_next: float | None  # by age; None when empty


def evaluate(rules: BufferRules, level: BufferLevel) -> FlushDecision:
    """Which rule fires now, or which fires next (the age rule always fires eventually)."""
    if level.files <= 0 or level.oldest_age_seconds is None:
        return FlushDecision(False, None, None, None)
    if rules.max_bytes is not None and level.bytes >= rules.max_bytes:
        return FlushDecision(True, "max_bytes", None, 0.0)
    if rules.max_files is not None and level.files >= rules.max_files and level.bytes >= rules.min_bytes:
        return FlushDecision(True, "max_files", None, 0.0)
    if level.oldest_age_seconds >= rules.max_age_seconds:
        return FlushDecision(True, "max_age", None, 0.0)
    remaining = rules.max_age_seconds - level.oldest_age_seconds
    # closest size rule by fill ratio, when it is nearer than the age rule's fill ratio
    fills = {"max_age": level.oldest_age_seconds / rules.max_age_seconds}
    if rules.max_bytes is not None:
        fills["max_bytes"] = level.bytes / rules.max_bytes
    if rules.max_files is not None and level.bytes >= rules.min_bytes:
        fills["max_files"] = level.files / rules.max_files
    return FlushDecision(False, None, max(fills, key=lambda k: fills[k]), remaining)


def batch_limits(rules: BufferRules) -> tuple[int | None, int | None]:
    """The most files and bytes one batch claims (None: no limit)."""
    return rules.max_files, rules.max_bytes
