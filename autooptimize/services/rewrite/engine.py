"""Which path rewrites one merge group (AO_REWRITE_ENGINE).

* ``spark``: Spark's own Parquet reader and writer, one Spark job per group;
* ``arrow``: the pyarrow path (spark_actors/arrow_rewrite.py) in the worker process's threads;
* ``arrow_on_spark``: that pyarrow path run as a Spark task (spark_actors/arrow_on_spark.py), the
  only one that reaches an object store here;
* ``auto`` (the default): ``arrow`` for a local group of at most AO_ARROW_GROUP_BYTES input bytes
  (a sort: a quarter of that, sorted in memory by spark_actors/arrow_sort.py), ``spark`` above that.

Why ``auto`` prefers the pyarrow path on this kind of machine (``python -m benchmarks.merge``, 1,000
files, 192 MB, 8 partitions, one warm action, 2 cores): Spark took 38.5 s, the pyarrow path 10.3 s,
both with the same verification (rows and the content digest of the inputs and of the outputs read
back by another reader). A Spark job also costs about a second before it reads a byte, which is most
of a live partition's merge of a few MB (the streaming benchmark). Spark keeps the groups too large
to hold comfortably in a worker (a row group is buffered per output, a sort holds its group); on a cluster
with more cores than the worker, AO_REWRITE_ENGINE=spark puts every group there.
"""

from __future__ import annotations

from autooptimize.domain.actions import Engine, MergeRequest

#: A sort holds its whole group in memory on the pyarrow path: it takes groups up to this share of
#: AO_ARROW_GROUP_BYTES (bytes on disk; decoded they are several times larger).
SORT_SHARE_DIVISOR = 4


def choose_engine(request: MergeRequest, group_bytes: int, *, spark_can: bool, local: bool,
                  ordered: bool, arrow_sortable: bool = False) -> Engine:
    """The engine of one group: the setting where it can rewrite the group faithfully, else the one that can.

    A table off ``file://`` needs the pyarrow path run as a Spark task; types or files Spark cannot
    write faithfully (``spark_can`` False) need a pyarrow path. A sorted group (``ordered``) takes a
    pyarrow path only when its sort keys allow it (``arrow_sortable``) and, under ``auto``, when it is
    at most a quarter of AO_ARROW_GROUP_BYTES (it is sorted in memory); otherwise Spark.
    """
    setting = request.engine
    if ordered:
        if not arrow_sortable:
            return Engine.SPARK
        if not local:
            return Engine.ARROW_ON_SPARK
        if setting in (Engine.ARROW.value, Engine.ARROW_ON_SPARK.value):
            return Engine(setting)
        if setting == Engine.SPARK.value and spark_can:
            return Engine.SPARK
        small = group_bytes <= request.arrow_group_bytes // SORT_SHARE_DIVISOR
        return Engine.ARROW if small or not spark_can else Engine.SPARK
    if not local:
        return Engine.ARROW_ON_SPARK
    if setting in (Engine.ARROW.value, Engine.ARROW_ON_SPARK.value):
        return Engine(setting)
    if not spark_can:
        return Engine.ARROW
    if setting == Engine.SPARK.value:
        return Engine.SPARK
    return Engine.ARROW if group_bytes <= request.arrow_group_bytes else Engine.SPARK
