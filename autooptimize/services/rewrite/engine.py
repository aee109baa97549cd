"""Which path rewrites one group (AO_REWRITE_ENGINE, or an action's ``engine`` option).

* ``spark`` (the default): every group of the action is one task of ONE Spark job on the executors
  (spark_actors/action_job.py). A task reads its inputs through the table's FileIO with pyarrow,
  applies deletes, sort or z-order, writes the outputs, reads them back with a second reader and
  returns DataFiles, rows and digests; the worker compares, commits and records. The same path serves
  ``file://`` and object stores.
* ``spark_sql``: Spark's own Parquet reader and writer, one Spark job per group (spark_actors/rewrite.py);
  only for tables on ``file://`` (no Hadoop S3 filesystem here) and types Spark writes faithfully. The
  worker reads the outputs back.
* ``local``: the same pyarrow rewrite in the worker process's threads, for a single machine without a
  Spark cluster. Never chosen unless asked for.

One exception to the setting: a sort whose keys pyarrow cannot sort by (NULLS FIRST and LAST mixed
before pyarrow 25, nested key columns) needs Spark's own sort (``spark_sql``); where that path cannot
reach the group the action is refused.
"""

from __future__ import annotations

from autooptimize.domain.actions import ActionRequest, Engine

ENGINES = tuple(e.value for e in Engine)


def choose_engine(request: ActionRequest, *, spark_can: bool, ordered: bool = False,
                  arrow_sortable: bool = True) -> Engine:
    """The engine of one group. ``spark_can``: Spark's own Parquet IO can rewrite it faithfully (types,
    field ids, a table on ``file://``); ``ordered`` with ``arrow_sortable`` False: only Spark can sort it."""
    setting = Engine(request.engine)
    if ordered and not arrow_sortable:
        return Engine.SPARK_SQL
    if setting == Engine.SPARK_SQL and not spark_can:
        return Engine.SPARK  # still Spark, on its executors: never the worker unless asked for
    return setting
