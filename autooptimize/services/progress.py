"""Large partitions: write an action's groups with bounded concurrency, commit them in one snapshot or
in parts.

Options of the merge and sort actions (validated on submission, nothing written on a bad value):

* ``partial_progress`` (bool, default false): commit finished groups in batches as they finish, each
  batch its own REPLACE snapshot carrying the action id and a part number (``autooptimize.action-part``);
  the last part also carries how many parts the action committed (``autooptimize.action-parts``). A
  failure late in a huge partition keeps the parts already committed.
* ``max_commits`` (int ≥ 1, default 10): at most this many parts per attempt; groups per part are
  ``ceil(groups / max_commits)``.

Every part replaces whole groups: a group's inputs and outputs are always in the same snapshot.
Under the default engine (``spark``) an action's groups are the tasks of one Spark job and come back
together when it ends; the parts are then committed one after the other (a failure of the job itself
commits none). The concurrency below applies to the ``spark_sql`` and ``local`` engines.

Concurrency: a Spark Connect session takes concurrent queries from several threads (the client's gRPC
channel is thread-safe, tags and user contexts are thread-local, each execution returns its own
observed metrics), so groups are submitted from a thread pool of ``AO_REWRITE_CONCURRENCY`` threads on
the worker's one session. Measured on this machine (2 cores shared with other work, local Spark
Connect server, whole-table merge of 8 partitions × 6 files × 40,000 rows = 8 groups,
``python -m benchmarks.concurrency --rounds 4``, rewrite phase): warm rounds, 1 in flight against 2 in
flight, 5.70 s / 4.05 s, 7.75 / 8.97, 5.30 / 5.59, 4.23 / 3.17, i.e. 0.71× to 1.16×, 0.97× summed;
the first (cold) round favours 2 in flight by far more (17.5 s / 5.0 s). So on two busy cores two
jobs in flight cost about the same as one and sometimes help; the gain is for servers with more cores
than one small group's job uses. Default 2.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from autooptimize.domain.checks import bool_option
from autooptimize.errors import InvalidArgument

log = logging.getLogger(__name__)

PROGRESS_OPTIONS = ("partial_progress", "max_commits")
DEFAULT_MAX_COMMITS = 10


@dataclass(frozen=True)
class PartialProgress:
    """How an action commits: one snapshot, or parts of at most ``max_commits`` per attempt."""

    partial: bool = False
    max_commits: int = DEFAULT_MAX_COMMITS

    @classmethod
    def of(cls, options: dict[str, Any] | None) -> PartialProgress:
        options = options or {}
        return cls(bool(options.get("partial_progress")), int(options.get("max_commits") or DEFAULT_MAX_COMMITS))


def validate_progress_options(options: dict[str, Any]) -> dict[str, Any]:
    """Normalise ``partial_progress`` and ``max_commits`` (InvalidArgument naming the option)."""
    out: dict[str, Any] = {}
    if "partial_progress" in options:
        out["partial_progress"] = bool_option("partial_progress", options["partial_progress"])
    if "max_commits" in options:
        value = options["max_commits"]
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
            raise InvalidArgument(f"option max_commits must be an integer ≥ 1, got {value!r}")
        out["max_commits"] = int(text)
    return out


R = TypeVar("R")


def write_groups(jobs: list[Callable[[], R]], concurrency: int, on_done: Callable[[int, R], None],
                 interrupt: Callable[[], None] | None = None) -> list[R]:
    """Run ``jobs`` with at most ``concurrency`` in flight; returns their results in job order.

    ``on_done(index, result)`` runs in the calling thread as each job finishes (partial commits happen
    there, while other jobs still write). When a job or ``on_done`` raises (anything, a crash stand-in
    too), no further job starts, ``interrupt`` is asked to stop the running ones, and every running job
    is waited for before the first error is raised: nobody cleans output a job is still writing.
    """
    results: dict[int, R] = {}
    if concurrency <= 1:  # no pool: the caller's thread runs each job in turn
        for i, job in enumerate(jobs):
            results[i] = job()
            on_done(i, results[i])
        return [results[i] for i in range(len(jobs))]
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="ao-rewrite")
    futures: dict[Future[R], int] = {}
    try:
        futures = {pool.submit(job): i for i, job in enumerate(jobs)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=futures.__getitem__):
                result = future.result()  # raises the job's error
                results[futures[future]] = result
                on_done(futures[future], result)
    except BaseException:
        for future in futures:
            future.cancel()
        if interrupt is not None and any(f.running() for f in futures):
            try:
                interrupt()
            except Exception as exc:  # stopping early is an optimisation; waiting below is the guarantee
                log.warning("could not interrupt running rewrite jobs: %s", exc)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [results[i] for i in range(len(jobs))]
