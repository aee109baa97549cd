"""A seeded family of streaming-ingest traces: the workloads every merge policy must hold on.

    python -m benchmarks.trace_family            # list the members

Each :class:`Member` fixes a target file size, a partition grain (``hour`` or ``day``), the bytes one
partition-hour receives, the share of those bytes that arrive late, the commit rate and the burst
probability; :func:`make_commits` turns it into commits, from its seed alone.

Time is compressed: one partition-hour of data arrives in :data:`HOUR_SECONDS` seconds of wall time (so a
run of a few simulated hours takes minutes, live or simulated), at the member's commit rate in real
commits per second. Each commit writes one file into the current partition (log-normal size around the
mean that gives the member's bytes per hour, σ 0.5; a burst multiplies it by 10–40). Late data: with
probabilities :data:`LATE_P` a commit also writes a file into the hour 1, 2 and 3 hours back, sized so
that the late share of all bytes is the member's ``late_share``. A daily partition collects its 24 hours
(late data into an hour of the same day lands in that day: one file per partition per commit).

:data:`FAMILY` holds the members every claim about the policy is checked on: targets 8, 32, 128 and
512 MiB; hourly and daily partitions; 1 MB to 2 GB per partition-hour; late shares 0, 10 and 35 %;
0.2 to 5 commits per second; with and without bursts. Pure code, no I/O.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

MiB = 1 << 20
MB = 1_000_000
GB = 1_000_000_000
#: Wall seconds in which one partition-hour of data arrives (compressed time).
HOUR_SECONDS = 60.0
#: Chance that a commit also writes a late file 1, 2 and 3 hours back.
LATE_P = (0.30, 0.15, 0.08)
SIGMA = 0.5
BURST_FACTOR = (10.0, 40.0)
FAMILY_SEED = 20261126


@dataclass(frozen=True)
class Commit:
    """One writer commit at ``at`` seconds: ``(partition, bytes)`` for each file it writes."""

    at: float
    files: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Member:
    """One workload of the family (see the module doc)."""

    name: str
    target: int
    grain: str  # "hour" or "day"
    bytes_per_hour: int  # bytes one partition-hour receives (on-time and late together)
    late_share: float
    rate: float  # commits per second
    burst_p: float
    hours: int  # simulated hours the writer runs
    seed: int

    def __post_init__(self) -> None:
        if self.grain not in ("hour", "day"):
            raise ValueError(f"Member.grain must be 'hour' or 'day', got {self.grain!r}")
        if not 0 <= self.late_share < 1 or self.rate <= 0 or self.hours < 1 or self.bytes_per_hour < 1:
            raise ValueError(f"member {self.name}: need 0 ≤ late_share < 1, rate > 0, hours ≥ 1, bytes ≥ 1")

    @property
    def commits(self) -> int:
        return round(self.hours * HOUR_SECONDS * self.rate)

    def partition_of(self, hour: int) -> int:
        return hour if self.grain == "hour" else hour // 24

    def describe(self) -> str:
        grain = "hourly" if self.grain == "hour" else "daily"
        return (f"{self.target // MiB} MiB, {grain}, {_bytes(self.bytes_per_hour)}/h, late "
                f"{self.late_share:.0%}, {self.rate:g}/s, burst {self.burst_p:g}, {self.hours} h, "
                f"{self.commits} commits")


def _bytes(n: int) -> str:
    return f"{n / GB:g} GB" if n >= GB else f"{n / MB:g} MB"


def _size(rng: random.Random, mean: float, burst_p: float) -> int:
    # log-normal whose mean (not median) is ``mean``
    size = rng.lognormvariate(math.log(mean) - SIGMA * SIGMA / 2, SIGMA)
    if burst_p and rng.random() < burst_p:
        size *= rng.uniform(*BURST_FACTOR)
    return max(1, int(size))


def make_commits(member: Member) -> list[Commit]:
    """The member's commits, the same for the same member (seeded)."""
    rng = random.Random(member.seed)
    per_hour = HOUR_SECONDS * member.rate
    on_time = member.bytes_per_hour * (1 - member.late_share) / per_hour
    late = member.bytes_per_hour * member.late_share / (per_hour * sum(LATE_P))
    out: list[Commit] = []
    for c in range(member.commits):
        at = c / member.rate
        hour = int(at // HOUR_SECONDS)
        files: dict[int, int] = {member.partition_of(hour): _size(rng, on_time, member.burst_p)}
        if member.late_share:
            for lag, p in enumerate(LATE_P, 1):
                if hour - lag >= 0 and rng.random() < p:
                    part = member.partition_of(hour - lag)
                    files[part] = files.get(part, 0) + _size(rng, late, member.burst_p)
        out.append(Commit(at, tuple(sorted(files.items()))))
    return out


def _member(i: int, target_mib: int, grain: str, per_hour: int, late: float, rate: float, burst: float,
            hours: int) -> Member:
    name = f"m{i:02d}-{target_mib}M-{grain[0]}-{_bytes(per_hour).replace(' ', '')}-L{round(late * 100)}-r{rate:g}"
    return Member(name, target_mib * MiB, grain, per_hour, late, rate, burst, hours, FAMILY_SEED + i)


#: The family (see the module doc). Hourly members run 5 simulated hours, daily ones 30.
FAMILY: tuple[Member, ...] = tuple(_member(i, *spec) for i, spec in enumerate((
    (8, "hour", 10 * MB, 0.35, 1.6, 0.02, 5),     # benchmarks.streaming's shape
    (128, "hour", 10 * MB, 0.35, 1.6, 0.02, 5),   # the same stream at the default target (issue 25)
    (32, "hour", 1 * MB, 0.0, 5.0, 0.0, 5),
    (512, "hour", 2 * GB, 0.10, 0.2, 0.02, 5),
    (128, "hour", 2 * GB, 0.0, 3.0, 0.0, 5),
    (8, "hour", 200 * MB, 0.10, 0.2, 0.0, 5),
    (32, "hour", 500 * MB, 0.10, 5.0, 0.02, 5),
    (512, "hour", 50 * MB, 0.35, 2.0, 0.05, 5),
    (128, "day", 100 * MB, 0.10, 1.0, 0.02, 30),
    (8, "day", 1 * MB, 0.35, 0.5, 0.0, 30),
    (512, "day", 20 * MB, 0.0, 1.0, 0.02, 30),
    (32, "day", 2 * GB, 0.35, 0.3, 0.02, 30),
)))


#: Seeds apart between a member's variants (:func:`variant`).
VARIANT_STRIDE = 1000


def variant(m: Member, k: int) -> Member:
    """Member ``m`` with its commits drawn from another seed (``k`` = 0: ``m`` itself): the same shape, a
    workload no constant was tuned on (``benchmarks.policy_seeds``)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"a variant is a whole number ≥ 0 (0: the member itself), got {k!r}")
    return m if k == 0 else replace(m, name=f"{m.name}~{k}", seed=m.seed + VARIANT_STRIDE * k)


def member(name: str) -> Member:
    """The member called ``name`` (or whose name starts with it, e.g. ``m03``)."""
    found = [m for m in FAMILY if m.name == name or m.name.startswith(name)]
    if len(found) != 1:
        raise ValueError(f"no single family member matches {name!r}; members: {', '.join(m.name for m in FAMILY)}")
    return found[0]


if __name__ == "__main__":
    for m in FAMILY:
        commits = make_commits(m)
        written = sum(b for c in commits for _, b in c.files)
        files = sum(len(c.files) for c in commits)
        print(f"{m.name:<32} {m.describe()}; {files} files, {_bytes(written)}")
