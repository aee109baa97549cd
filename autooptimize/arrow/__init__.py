"""The pyarrow rewrite path: every group of the default engine, as a task on a Spark executor
(spark_actors/group_tasks.py), and every group of the ``local`` engine, in the worker.

pyiceberg's reader in (``rewrite.scan_files``), deletes applied (``deletes``), sorted (``sort``) or
z-ordered (``zorder``), repartitioned (``partition``), written with field ids (``writers``), row lineage
kept (``lineage``); buffered files consolidated (``consolidate``). An adapter: it imports no service.
"""
