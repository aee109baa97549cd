"""An actor worker process gets its Spark side ready as it starts, not in its first action.

Measured on a fresh local server (pyspark 4.3, 2 cores): the first action of a worker process took 8.3 s
against 0.4 s for the next ones, because it opened the process's Spark Connect session, shipped our code
(spark_actors/artifacts.py) and ran the server's first job, whose executors started their Python workers,
imported our code and loaded the digest kernels. :func:`warm_up` does all of that at once in a thread of
the new process (tasks/app.py), so a commit that arrives after a deploy or a restart is merged at the
usual speed. It needs no table: the job's tasks run :func:`spark_actors.group_tasks.warm`.

A failure (the server is not up yet) is logged and changes nothing: the first action opens the session
itself and reports an unreachable server as it always has.
"""

from __future__ import annotations

import logging
import threading
import time

from autooptimize.config import Settings
from spark_actors import group_tasks
from spark_actors.action_job import run_action_job
from spark_actors.session import get_session

log = logging.getLogger(__name__)


def warm_up(settings: Settings) -> dict[str, float | int | str]:
    """Open this process's session, ship our code and run one job of ``AO_SPARK_CORES`` tasks on the
    executors; seconds of each step, how many distinct executor Python workers answered, and the Arrow
    memory pools they allocate from."""
    started = time.monotonic()
    spark = get_session(settings)
    opened = time.monotonic()
    job = run_action_job(spark, None, [(group_tasks.warm, ())] * settings.spark_cores)
    done = time.monotonic()
    return {"session": round(opened - started, 3), "ship_code": round(job.timings.get("ship_code", 0.0), 3),
            "job": round(job.timings.get("job", 0.0), 3), "total": round(done - started, 3),
            "python_workers": len({pid for pid, _ in job.values()}),
            "memory_pools": ",".join(sorted({pool for _, pool in job.values()}))}


def warm_up_in_background(settings: Settings) -> threading.Thread:
    """:func:`warm_up` in a daemon thread (an action that starts meanwhile waits for the session it opens)."""

    def run() -> None:
        try:
            figures = warm_up(settings)
        except Exception as exc:  # the first action reports it, with its own error handling
            log.warning("actor warm-up failed (%s); the first action opens the Spark session itself",
                        type(exc).__name__)
            return
        log.info("actor warm: Spark session open, code shipped, %s executor Python worker(s) ready in %.1f s "
                 "(session %.1f s, job %.1f s; Arrow memory pool %s)", figures["python_workers"], figures["total"],
                 figures["session"], figures["job"], figures["memory_pools"])

    thread = threading.Thread(target=run, name="ao-warm-up", daemon=True)
    thread.start()
    return thread
