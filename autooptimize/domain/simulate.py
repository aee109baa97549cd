"""Replay a table's writes through a merge policy or a periodic bin-pack, and measure what each costs.

The one simulator behind ``benchmarks.policy_sim`` and ``autooptimize whatif --suggest``: the same
code judges a policy on a synthetic family of traces and a tuning on a table's own history.

A history is a sequence of :class:`Write` (seconds, and the bytes each partition received). Two ways of
keeping the table:

* :func:`simulate_baseline`: after every ``every`` writes, a blocking bin-pack of every partition with
  Iceberg's size-ratio rule (``plan_iceberg_bin_pack``, min input files 2); once more after the last.
  Live files are counted right after each write, before the bin-pack that follows it (as
  ``benchmarks.streaming`` counts its live bin-pack run: the files a reader sees while it runs).
* :func:`simulate_policy`: the live-partition policy (:func:`~autooptimize.domain.policy.plan_partition`)
  judges a partition when a write touches it, when a merge of it lands, when it settles and when it
  goes cold (the service's timers; each partition's cold-after time from its own recent gaps between
  writes, :meth:`~autooptimize.domain.policy.PolicyTuning.cold_after`). A merge lands ``latency`` seconds
  after its decision; it plans as it lands, or ``start_delay`` seconds after the decision as the service's
  action plans when it starts; with a pace (:mod:`~autooptimize.domain.pace`) its run from its start grows
  with what it reads. One merge in flight per partition. After the last write the clock runs on
  until every partition is cold and judged.

Figures (:class:`Figures`): live data files after each write (mean, max), files replaced, bytes
rewritten, write amplification (bytes rewritten / bytes written), files and excess MSE at the end
(``Σ (SSE − SSE_best) / N`` over the partitions, in bytes², SSE_best from
:func:`~autooptimize.domain.entropy.best_layout` of each partition's bytes capped at the target).
Output model: a writer's file weighs ``output_ratio`` times its bytes once first merged (1 by default);
a merged file keeps its size when merged again. With ``file_overhead`` instead, every merge writes
``output_ratio`` × what it read less ``file_overhead`` bytes for each file it removed
(:mod:`~autooptimize.domain.output_model`), a writer's file counted at ``first_ratio`` × its bytes (1 for
a fit on REPLACE commits, whose share takes it in; a calibration measures it on single files).
Pure: the standard library and :mod:`autooptimize.domain` only.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autooptimize.domain.entropy import end_layout
from autooptimize.domain.pace import SizePace
from autooptimize.domain.planning import Plan, PlanFile, RewriteGroup, balance_outputs, plan_iceberg_bin_pack
from autooptimize.domain.planning.types import split_evenly
from autooptimize.domain.policy import (
    COLD_GAPS_KEPT,
    WAIT_RULES,
    PolicyTuning,
    expected_partition_bytes,
    plan_partition,
)
from autooptimize.domain.time_spans import Spans, TimePartition

__all__ = ["BASELINE_EVERY", "LATENCY_SECONDS", "Figures", "Merge", "MergeLog", "PartitionState",
           "Planner", "TimePartition", "Write", "simulate_baseline", "simulate_policy"]

#: The baseline bin-packs after this many writes (benchmarks.streaming's ``--compact-every``).
BASELINE_EVERY = 20
#: Seconds from a plan to its commit in the simulated service (measured live: 1–3 s per merge).
LATENCY_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Write:
    """One writer commit at ``at`` seconds: ``(partition, bytes)`` for each file it adds."""

    at: float
    files: tuple[tuple[Hashable, int], ...]


@dataclass(frozen=True, slots=True)
class Figures:
    mean_live_files: float
    max_live_files: int
    files_replaced: int
    bytes_rewritten: int
    bytes_written: int
    end_files: int
    end_excess_mse: float  # bytes²
    actions: int
    rules: tuple[tuple[str, int], ...] = ()

    @property
    def write_amplification(self) -> float:
        return self.bytes_rewritten / self.bytes_written if self.bytes_written else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"mean_live_files": self.mean_live_files, "max_live_files": self.max_live_files,
                "files_replaced": self.files_replaced, "bytes_rewritten": self.bytes_rewritten,
                "bytes_written": self.bytes_written,
                "write_amplification": self.write_amplification, "end_files": self.end_files,
                "end_excess_mse_mib2": self.end_excess_mse / (1 << 40), "actions": self.actions,
                "rules": dict(self.rules)}


@dataclass
class _Table:
    target: int
    #: what a writer's bytes weigh once merged (rows that compress better together make smaller files)
    output_ratio: float = 1.0
    #: None: the ratio model above. Bytes: every merge writes ``output_ratio`` × what it read, less this
    #: many bytes for each file it removed (a Parquet file's footer and metadata), as ``OutputModel`` fits it
    file_overhead: int | None = None
    first_ratio: float = 1.0  # with ``file_overhead``: what the engine's writer makes of a writer's file alone
    parts: dict[Hashable, dict[str, int]] = field(default_factory=dict)
    #: what each partition holds now: it received, less what merges saved (the service reads its files)
    held: dict[Hashable, int] = field(default_factory=dict)
    newest: dict[Hashable, float] = field(default_factory=dict)
    names: itertools.count = field(default_factory=itertools.count)
    live_files: int = 0
    written: int = 0
    rewritten: int = 0
    replaced: int = 0
    actions: int = 0
    counts: list[int] = field(default_factory=list)
    # (written, rewritten, replaced, actions) when measuring began (see simulate_policy's measure_from)
    start: tuple[int, int, int, int] = (0, 0, 0, 0)

    def measure_from_here(self) -> None:
        """Count only what happens from now on (the files already there stay, and count as live)."""
        self.start = (self.written, self.rewritten, self.replaced, self.actions)
        self.counts.clear()

    def add(self, part: Hashable, size: int, now: float) -> None:
        self.parts.setdefault(part, {})[f"w{next(self.names)}"] = size
        self.held[part] = self.held.get(part, 0) + size
        self.newest[part] = now
        self.written += size
        self.live_files += 1

    def files(self, part: Hashable) -> list[PlanFile]:
        # what a writer's file will weigh once merged, as the service's planner estimates it from the table's
        # rewrites (services/sizing: bytes per row, to 0.1 % of what its merges wrote): the ratio, less the
        # footer a merge drops with each file under the fitted model; a merged file keeps its size
        if self.output_ratio == 1.0 and not self.file_overhead and self.first_ratio == 1.0:
            return [PlanFile(p, s) for p, s in self.parts[part].items()]
        overhead = self.file_overhead or 0
        ratio = self.output_ratio * (self.first_ratio if self.file_overhead is not None else 1.0)
        return [PlanFile(p, s, out_size=max(1, round(s * ratio) - overhead) if p[0] == "w" else None)
                for p, s in self.parts[part].items()]

    def apply(self, part: Hashable, groups: Sequence[RewriteGroup]) -> None:
        files = self.parts[part]
        for g in groups:
            if any(f.path not in files for f in g.files):
                continue  # cannot happen with one merge in flight per partition; never count a lost merge
            for f in g.files:
                del files[f.path]
            outputs = g.output_sizes()
            if self.file_overhead is not None:
                read = g.bytes_in if self.first_ratio == 1.0 else sum(  # writer files at their first ratio
                    f.size * self.first_ratio if f.path[0] == "w" else f.size for f in g.files)
                weight = round(read * self.output_ratio) - self.file_overhead * (len(g.files) - len(outputs))
                outputs = split_evenly(max(weight, len(outputs)), len(outputs))
            for size in outputs:
                files[f"m{next(self.names)}"] = size
            self.held[part] += sum(outputs) - g.bytes_in
            self.rewritten += g.bytes_in
            self.replaced += len(g.files)
            self.live_files += len(outputs) - len(g.files)
            self.actions += 1

    def figures(self, rules: dict[str, int] | None = None, end_parts: Collection[Hashable] | None = None) -> Figures:
        parts = self.parts if end_parts is None else {p: f for p, f in self.parts.items() if p in end_parts}
        n, excess = end_layout((list(files.values()) for files in parts.values()), self.target)
        return Figures(
            mean_live_files=sum(self.counts) / len(self.counts) if self.counts else 0.0,
            max_live_files=max(self.counts, default=0), files_replaced=self.replaced - self.start[2],
            bytes_rewritten=self.rewritten - self.start[1], bytes_written=self.written - self.start[0],
            end_files=n, end_excess_mse=excess, actions=self.actions - self.start[3],
            rules=tuple(sorted((rules or {}).items())))


def simulate_baseline(writes: Sequence[Write], target: int, every: int = BASELINE_EVERY,
                      output_ratio: float = 1.0, file_overhead: int | None = None,
                      first_ratio: float = 1.0, end_parts: Collection[Hashable] | None = None) -> Figures:
    """A blocking Iceberg bin-pack of every partition after every ``every`` writes and after the last.
    ``end_parts``: the partitions the end layout counts (None: all), as :func:`simulate_policy`'s."""
    t = _Table(target, output_ratio, file_overhead, first_ratio)

    def binpack() -> None:
        for part in t.parts:
            t.apply(part, plan_iceberg_bin_pack(t.files(part), target, min_input_files=2).groups)

    for k, w in enumerate(writes, 1):
        for part, size in w.files:
            t.add(part, size, w.at)
        t.counts.append(t.live_files)  # right after the commit, before the bin-pack it waits for
        if k % every == 0:
            binpack()
    if len(writes) % every:
        binpack()
    return t.figures(end_parts=end_parts)


def expected_bytes(held: dict[Hashable, int], part: Hashable, target: int) -> int | None:
    """What a partition is expected to hold, from the bytes the table's other partitions hold
    (:func:`~autooptimize.domain.policy.expected_partition_bytes`, as the service takes it from its
    partition statistics, ``storage.stats.median_partition_bytes``)."""
    return expected_partition_bytes([b for p, b in held.items() if p != part], target)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What a :data:`Planner` is told of one partition when it is judged: its key, its live files, the tuning, whether
    it is cold (by its cold-after time or past the late horizon), whether it is the newest time partition
    of its spec (every partition without a time field is), and the bytes it holds (``received_bytes``: what
    it received, less what merges saved, as the service reads its files) and is expected to hold
    (:func:`expected_bytes`)."""

    partition: Hashable
    files: list[PlanFile]
    tuning: PolicyTuning
    cold: bool
    newest: bool
    received_bytes: int
    expected_bytes: int | None


@dataclass(frozen=True, slots=True)
class Merge:
    """One merge of a replay as it lands: when, after how many writes, which partition, the files and bytes
    it read, and the rule that planned it."""

    at: float
    writes: int
    partition: Hashable
    files: int
    bytes_in: int
    rule: str


MergeLog = Callable[[Merge], None]


#: A rule tried in place of the policy in a what-if experiment (``benchmarks.policy_priced``): its plan for
#: a partition and the rule's name, or None where the policy's own plan stands.
Planner = Callable[[PartitionState], "tuple[Plan, str] | None"]


def simulate_policy(writes: Sequence[Write], tuning: PolicyTuning, latency: float = LATENCY_SECONDS,
                    measure_from: float | None = None, output_ratio: float = 1.0,
                    planner: Planner | None = None, start_delay: float | None = None,
                    timer_lag: float = 0.0, timer_every: float = 0.0, timer_phase: float = 0.0,
                    on_merge: MergeLog | None = None, file_overhead: int | None = None,
                    pace: SizePace | None = None, first_ratio: float = 1.0,
                    end_parts: Collection[Hashable] | None = None) -> Figures:
    """The live-partition policy with ``tuning`` over ``writes`` (see the module doc). ``start_delay``:
    seconds from a decision to the moment its merge plans (reads the partition's files), as the service's
    action does when it starts; it lands ``latency`` after the decision (None: it plans as it lands, so
    it takes in the files written meanwhile). With a ``pace`` (and a ``start_delay``), a merge runs from
    its start as long as :meth:`SizePace.run` gives for what it reads: ``latency`` is then the latency of a
    merge of the pace's reference size. ``measure_from``
    (seconds, as ``Write.at``): the whole history is replayed, but the figures count only the writes at
    or after it and what happens from then on (AutoAnalyze compares them with what the table did since
    a suggestion). ``output_ratio``: what a writer's bytes weigh once merged (1: the same); with
    ``file_overhead`` (bytes), what every merge's output weighs against its input, less that many bytes for
    each file it removes (the table's fitted ``OutputModel``), a writer's file counted at ``first_ratio`` ×
    its bytes (a calibrated model's). ``timer_lag``:
    seconds from a partition's settle or cold-after moment to its judgement (0: at that moment). The
    service's listener hands such partitions over at most once a second, so it judges them 0.35–1.8 s
    late (docs/policy-history.md, "A late file re-reading a small partition"); a write then cancels it.
    ``timer_every`` (0: no clock) models the service's listener: the judgements come on its passes, that
    many seconds apart from ``timer_phase``; each moment is judged on the first pass at or after it, plus
    what is left of ``timer_lag`` once half a period is taken out, so the lag still averages ``timer_lag``
    over moments but a moment just after a pass waits longer than one just before it. And a partition
    left alone as written to (a wait rule) is judged on a timer only once that verdict is the settle time
    old, as ``services.submit_decided`` does: a cold moment soon after the settle judgement waits, and a
    late write meanwhile cancels it (``replay_clock.simulate_on_clock``; docs/policy-history.md, "The
    listener's clock in the replay"). ``on_merge``: called with each merge as it lands (``replay_diff``).
    ``end_parts``: the partitions the end layout (end files, excess MSE) counts (None: all; a check of a
    prediction counts those the table has finished, ``services.autotune.check_prediction``).

    With ``tuning.late_horizon`` (time partitions: integer ordinals such as hours, or :class:`TimePartition`,
    each spec on its own): a partition further behind its spec's newest than any write has reached back is cold
    (:func:`~autooptimize.domain.policy.past_late_horizon`), and such partitions are judged when a newer
    partition gets its first file, as the service's listener hands them over."""
    if start_delay is not None and not 0 <= start_delay <= latency:
        raise ValueError(f"start_delay must be None or within [0, latency ({latency})], got {start_delay!r}")
    if pace is not None and start_delay is None:
        raise ValueError("a pace needs a start_delay: a merge's run is known once it has planned")
    if not timer_lag >= 0:
        raise ValueError(f"timer_lag must be seconds ≥ 0, got {timer_lag!r}")
    if not timer_every >= 0:
        raise ValueError(f"timer_every must be seconds ≥ 0 (0: no clock), got {timer_every!r}")
    after_pass = max(0.0, timer_lag - timer_every / 2)  # the rest of the lag, once the pass has come

    def judged_at(moment: float) -> float:  # the listener's first pass at or after the moment, then the rest
        if not timer_every:
            return moment + timer_lag
        return math.ceil((moment - timer_phase) / timer_every) * timer_every + timer_phase + after_pass
    t = _Table(tuning.target, output_ratio, file_overhead, first_ratio)
    spans = Spans()
    planned: dict[Hashable, tuple[RewriteGroup, ...]] = {}  # with start_delay: each started merge's plan

    def past(part: Hashable) -> bool:
        return tuning.late_horizon and spans.past_horizon(part)
    rules: dict[str, int] = {}
    pending: set[Hashable] = set()
    events: list[tuple[float, int, str, Hashable, float]] = []  # (at, seq, kind, partition, the write a timer is for)
    seq = itertools.count()

    gaps: dict[Hashable, list[float]] = {}  # each partition's recent gaps between writes, newest first
    ruled: dict[Hashable, str] = {}  # the rule of each partition's last plan
    waited: dict[Hashable, float] = {}  # when a partition was last judged and left alone as written to

    def cold_after(part: Hashable) -> float:
        return tuning.cold_after(gaps.get(part))

    def plan(part: Hashable, now: float) -> tuple[RewriteGroup, ...]:
        # the same sum the cold timer was set at (``now - newest`` may round just under cold_after)
        cold = now >= t.newest[part] + cold_after(part) or past(part)
        quiet = tuning.quiet_merge and not cold and now >= t.newest[part] + tuning.settle_seconds
        files = t.files(part)
        # the bytes the partitions hold, as the service's policy is told them (its files; other partitions'
        # statistics), not the writers' bytes: a merge that writes 1.3 % less moved the replay's tiers
        expected = expected_bytes(t.held, part, tuning.target)
        got = None if planner is None else planner(
            PartitionState(part, files, tuning, cold, spans.is_newest(part), t.held[part], expected))
        if got is None:
            result = plan_partition(files, tuning.target, tuning.tolerance, cold=cold, quiet=quiet, fan_in=tuning.fan_in,
                                    received_bytes=t.held[part], expected_bytes=expected,
                                    leave_alone_below=tuning.leave_alone_below, price=tuning.price,
                                    newest=spans.is_newest(part), cold_absorb=tuning.cold_absorb)
            got = result.plan, result.rule
        rules[got[1]] = rules.get(got[1], 0) + 1
        ruled[part] = got[1]
        return balance_outputs(got[0], files, grow=False).groups

    def judge(part: Hashable, now: float) -> None:
        """Decide: submit a merge when the policy has one (it plans again when it runs, as the service's)."""
        if part in pending or part not in t.parts:
            return
        if plan(part, now):
            pending.add(part)
            waited.pop(part, None)
            kind, delay = ("land", latency) if start_delay is None else ("start", start_delay)
            heapq.heappush(events, (now + delay, next(seq), kind, part, now))
        elif ruled[part] in WAIT_RULES:
            waited[part] = now
        else:
            waited.pop(part, None)

    def run_until(until: float) -> None:
        while events and events[0][0] <= until:
            at, _, kind, part, set_by = heapq.heappop(events)
            if kind == "start":  # the action plans on the files as they are when it starts
                planned[part] = plan(part, at)
                run = latency - (start_delay or 0.0)
                if pace is not None:  # its run grows with what it reads
                    run = pace.run(run, sum(g.bytes_in for g in planned[part]))
                heapq.heappush(events, (at + run, next(seq), "land", part, at))
                continue
            if kind == "land":
                pending.discard(part)
                groups = planned.pop(part) if part in planned else plan(part, at)
                if on_merge is not None and groups:
                    on_merge(Merge(at, len(t.counts), part, sum(len(g.files) for g in groups),
                                   sum(g.bytes_in for g in groups), ruled[part]))
                t.apply(part, groups)
            elif t.newest[part] > set_by:
                continue  # written again since the timer was set
            elif timer_every and part in waited and at < waited[part] + tuning.settle_seconds:
                # the service judges a partition it left alone as written to again only once that verdict
                # is the settle time old (services.submit_decided): the listener hands it over on each pass
                # until then, and the first pass after it is judged
                heapq.heappush(events, (judged_at(waited[part] + tuning.settle_seconds), next(seq), kind, part,
                                        set_by))
                continue
            judge(part, at)

    measuring = measure_from is None
    for w in writes:
        run_until(w.at)
        if not measuring and measure_from is not None and w.at >= measure_from:
            t.measure_from_here()
            measuring = True
        advanced = (tuning.late_horizon or planner is not None or tuning.price > 0) and spans.extend(
            p for p, _ in w.files)
        for part, size in w.files:
            if part in t.newest and w.at > t.newest[part]:  # as the listener keeps them (one per commit)
                gaps[part] = [w.at - t.newest[part], *gaps.get(part, ())][:COLD_GAPS_KEPT]
            t.add(part, size, w.at)
            heapq.heappush(events, (judged_at(w.at + tuning.settle_seconds), next(seq), "settle", part, w.at))
            heapq.heappush(events, (judged_at(w.at + cold_after(part)), next(seq), "cold", part, w.at))
        for part, _ in w.files:
            judge(part, w.at)
        if advanced:  # a newer partition started: those now past the horizon are finished
            for part in [p for p in t.parts if planner is not None or past(p)]:
                judge(part, w.at)
        t.counts.append(t.live_files)
    if not measuring:  # no write at or after measure_from: nothing to count
        t.measure_from_here()
    run_until(float("inf"))
    return t.figures(rules, end_parts)

