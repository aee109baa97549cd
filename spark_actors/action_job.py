"""One Spark job per action: every group of the action is one task of one job, run on the executors.

The service's worker hands the job a :class:`TableContext` (the table's metadata without its snapshot
history, and the FileIO properties: endpoint, keys, region) and one call per group: a module-level
function of ours and its arguments. The job is ``spark.range(n, numPartitions=n)`` (exactly one row,
so one task, per group) followed by ``mapInArrow``; each task rebuilds the table object from the
context in memory (no metadata file is read), unpickles only its own call, runs it, and sends back one
pickled, small result (paths, DataFiles built from the footers, rows, digests, timings, which executor
ran it) or the error it raised. Spark schedules the tasks over every executor core, retries a task whose
executor died, and stops them all when the action's tag is interrupted (``spark.interruptTag``).

Our code reaches the executors as a session artifact (:mod:`spark_actors.artifacts`), so an executor
needs only the libraries listed in docs/engines.md, not this package.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.fileio import io_properties
from spark_actors.artifacts import build_archive, ship_code

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TableContext:
    """What a task needs to act on the table: its metadata (schemas, specs, sort orders, properties; no
    snapshots) and the FileIO properties."""

    metadata: TableMetadata
    metadata_location: str
    io_properties: dict[str, str]

    @classmethod
    def of(cls, table: Table) -> TableContext:
        # the snapshot history can be large and no task needs it: the groups name their files
        metadata = table.metadata.model_copy(update={
            "snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {}, "current_snapshot_id": None,
            "statistics": [], "partition_statistics": []})
        return cls(metadata, table.metadata_location, io_properties(table.io))

    def table(self) -> Table:
        """The table as a task sees it (built in memory; reads nothing)."""
        from pyiceberg.catalog.noop import NoopCatalog
        from pyiceberg.io import load_file_io
        from pyiceberg.table import StaticTable

        io = load_file_io(properties=self.io_properties, location=self.metadata_location)
        return StaticTable(identifier=("autooptimize-task", self.metadata_location), metadata=self.metadata,
                           metadata_location=self.metadata_location, io=io, catalog=NoopCatalog("autooptimize"))


@dataclass(frozen=True)
class TaskOutcome:
    """What one task sent back: its call's result (or None), the error it raised (or None), the executor
    that ran it (host and JVM pid), its Spark attempt number, its wall time and the CPU seconds of its
    Python worker (all its threads: pyarrow's IO and compute pools included)."""

    index: int
    value: Any
    error: BaseException | None
    executor: str
    attempt: int
    seconds: float
    cpu: float = 0.0
    started_at: float = 0.0  # wall clock (epoch seconds) as the task started: the job's timeline on one host


@dataclass(frozen=True)
class JobOutcome:
    outcomes: tuple[TaskOutcome, ...]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def executors(self) -> set[str]:
        return {o.executor for o in self.outcomes}

    def values(self) -> list[Any]:
        """Every task's value in call order; the first task's error is raised (after all tasks ended)."""
        for outcome in self.outcomes:
            if outcome.error is not None:
                raise outcome.error
        return [o.value for o in self.outcomes]


Call = tuple[Callable[..., Any], tuple[Any, ...]]


def _executor() -> str:
    """``host:pid`` of the JVM that runs this Python worker (its nearest ``java`` ancestor)."""
    pid = os.getpid()
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            if comm == "java":
                return f"{socket.gethostname()}:{pid}"
            pid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            break
    return f"{socket.gethostname()}:{os.getppid()}"


def run_task(packed_context: bytes, index: int, packed_call: bytes) -> bytes:
    """Runs in an executor's Python worker: the pickled ``call`` on the table of the pickled context (None
    without one), its outcome pickled.

    Everything alive as the task starts is first moved to the permanent generation (``gc.freeze``), before
    the task's own objects exist. Spark's worker daemon runs a full ``gc.collect()`` after every task
    before it takes the next one; over the objects of the modules a task imports (pyiceberg, pyarrow,
    numba, ours) that took about 80 ms, most of the gap between two tasks of one executor core
    (``benchmarks.merge``: an action's job spent 0.8–1.1 s beyond its tasks before, 0.4–0.8 s after). The
    collection then looks only at what the tasks made since."""
    import gc

    from pyspark import TaskContext

    gc.freeze()
    started_at = time.time()
    started, cpu = time.monotonic(), time.process_time()  # a Python worker runs one task at a time
    task = TaskContext.get()
    attempt = task.attemptNumber() if task is not None else 0
    context: TableContext | None = pickle.loads(packed_context)  # noqa: S301 - our own job's payload
    function, args = pickle.loads(packed_call)  # noqa: S301 - our own job's payload
    try:
        table = context.table() if context is not None else None
        value, error = function(table, *args, attempt=attempt), None
    except Exception as exc:  # sent back whole: the action maps it as if it ran in the worker
        value, error = None, exc
    outcome = TaskOutcome(index, value, error, _executor(), attempt, time.monotonic() - started,
                          time.process_time() - cpu, started_at)
    try:
        return pickle.dumps(outcome)
    except Exception as exc:  # an unpicklable error still reaches the action, as text
        return pickle.dumps(TaskOutcome(index, None, VerificationFailed(f"{type(exc).__name__}: {error or exc}"),
                                        outcome.executor, attempt, outcome.seconds, outcome.cpu, started_at))


def run_action_job(spark: SparkSession, context: TableContext | None, calls: Sequence[Call],
                   tag: str | None = None) -> JobOutcome:
    """Run ``calls`` as the tasks of one Spark job (one task each), tagged ``tag``; every outcome in call
    order. A call is ``(function, args)``: ``function(table, *args, attempt=n)`` a module-level function
    of ours, ``args`` picklable; ``table`` is None without a ``context`` (spark_actors/warmup.py)."""
    import pyarrow as pa

    started = time.monotonic()
    ship_code(spark)
    archive = build_archive()[1].name
    shipped = time.monotonic()
    calls = list(calls)
    if not calls:
        return JobOutcome((), 0.0)
    # the context once, each call apart: a task unpickles only its own call (an action of 1,000 files
    # sent every task all 1,000 DataFiles)
    packed_context = pickle.dumps(context)
    packed_calls = [pickle.dumps(call) for call in calls]

    def run(batches: Any) -> Any:
        import os
        import sys
        import tempfile
        import zipfile

        # our code from the artifact, extracted once per host and content: numba caches its compiled
        # digest kernels beside their source only for a source file on disk (from the zip every new
        # Python worker compiled them again, ~20 s)
        target = os.path.join(tempfile.gettempdir(), "autooptimize-code", archive.removesuffix(".zip"))
        if target not in sys.path:
            if not os.path.isdir(target):
                zipped = next((p for p in sys.path if p.endswith(archive)), None)
                if zipped is not None:
                    partial = f"{target}.{os.getpid()}.tmp"
                    with zipfile.ZipFile(zipped) as zf:
                        zf.extractall(partial)
                    try:
                        os.rename(partial, target)
                    except OSError:  # another worker of this host was first
                        import shutil

                        shutil.rmtree(partial, ignore_errors=True)
            if os.path.isdir(target):
                sys.path.insert(0, target)
        from spark_actors.action_job import run_task

        for batch in batches:
            for index in batch.column("id").to_pylist():
                outcome = run_task(packed_context, index, packed_calls[index])
                yield pa.RecordBatch.from_pylist([{"id": index, "outcome": outcome}],
                                                 schema=pa.schema([("id", pa.int64()), ("outcome", pa.binary())]))

    frame = spark.range(0, len(calls), 1, len(calls)).mapInArrow(run, "id long, outcome binary")
    if tag is not None:
        spark.addTag(tag)
    submitted = time.time()
    try:
        rows = frame.collect()
    finally:
        if tag is not None:
            spark.removeTag(tag)
    by_index = {int(r["id"]): pickle.loads(r["outcome"]) for r in rows}  # noqa: S301 - our own tasks' results
    if sorted(by_index) != list(range(len(calls))):
        raise VerificationFailed(f"the action's Spark job returned outcomes for tasks {sorted(by_index)}, "
                                 f"expected 0..{len(calls) - 1}")
    outcomes = tuple(by_index[i] for i in range(len(calls)))
    return JobOutcome(outcomes, time.monotonic() - started,
                      {"ship_code": shipped - started, "job": time.monotonic() - shipped,
                       **_timeline(outcomes, submitted, time.time())})


def _timeline(outcomes: Sequence[TaskOutcome], submitted: float, collected: float) -> dict[str, float]:
    """Where a job's wall went outside its tasks, by the wall clock (exact when the executors share the
    worker's host): from submitting it to its first task's start, and from its last task's end to the rows
    back in the worker."""
    if not outcomes:
        return {}
    return {"to_first_task": min(o.started_at for o in outcomes) - submitted,
            "after_last_task": collected - max(o.started_at + o.seconds for o in outcomes)}
