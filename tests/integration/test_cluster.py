"""The default engine on a real Spark standalone cluster (master, two workers, a Connect server against
them; tests/integration/cluster.py): the groups run on both executors, whose Python does not have our
package installed, and the process that runs the action reads next to none of the bytes rewritten."""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType, LongType, NestedField, StringType

from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.tables import action_outputs, identifier, live_files, second_reader_checksum

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

_names = itertools.count()
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "part", StringType(), required=True),
                NestedField(3, "payload", BinaryType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))


def make_table(catalog, partitions: int, files: int, file_bytes: int, name: str):
    """``partitions`` partitions of ``files`` files each of about ``file_bytes`` of incompressible payload,
    written in ONE commit (one manifest: the metadata the worker reads stays small beside the data)."""
    table = catalog.create_table(f"test.{name}_{next(_names)}", schema=SCHEMA, partition_spec=SPEC,
                                 properties={"write.target-file-size-bytes": str(file_bytes)})
    rows_per_file = max(1, file_bytes // 1024)
    rows = partitions * files * rows_per_file
    data = pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "part": pa.array([f"p{i // (files * rows_per_file)}" for i in range(rows)], pa.string()),
        "payload": pa.array([os.urandom(1000) for _ in range(rows)], pa.binary()),
    }, schema=pa.schema([pa.field("id", pa.int64(), False), pa.field("part", pa.string(), False),
                         pa.field("payload", pa.binary())]))
    table.append(data)
    return table


def io_counters() -> dict[str, int]:
    """This process's /proc/self/io: rchar counts every byte read (files, sockets), read_bytes the disk."""
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}


def _merge(settings, spark, table, target="1GiB"):
    ident = identifier(table)
    tracking.track(settings, ident, target_file_size=target)
    action_id = actions.submit(settings, ident, dispatch=False)
    return action_id, actions.execute(settings, action_id, spark=spark)


def _groups(settings, action_id):
    with session_scope(settings) as s:
        return get_action(s, action_id).checkpoint["groups"]


def test_executors_run_the_base_interpreter_without_our_package(spark_cluster):
    """The route docs/engines.md documents is the only way our code reaches the executors."""
    _, _, _, server = spark_cluster
    from tests.integration.cluster import session_for

    fresh = session_for(server.info.remote)  # a session that never had the artifact

    def probe(batches):
        import importlib.util
        import sys

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"python": sys.executable, "path": ":".join(sys.path),
                                               "ours": importlib.util.find_spec("autooptimize") is not None}])

    try:
        rows = fresh.range(0, 2, 1, 2).mapInArrow(probe, "python string, path string, ours boolean").collect()
    finally:
        fresh.stop()
    assert rows and all(".venv" not in r["python"] for r in rows), rows
    # a Python worker reused after another session's tasks keeps that session's artifact on its path
    assert all(not r["ours"] or "autooptimize-" in r["path"] for r in rows), rows


def test_merge_of_eight_groups_runs_on_both_executors_and_the_worker_moves_no_data(settings, spark_cluster,
                                                                                    catalog):
    cluster_settings, session, cluster, _ = spark_cluster
    warm = make_table(catalog, partitions=2, files=2, file_bytes=64 << 10, name="cluster_warm")
    _, out = _merge(settings, session, warm)  # imports, the artifact and the Python workers in place
    assert out["state"] == "succeeded", out

    table = make_table(catalog, partitions=8, files=3, file_bytes=2 << 20, name="cluster_merge")
    assert len(live_files(table)) == 24
    rows_before, checksum_before = second_reader_checksum(table)
    before = io_counters()
    action_id, out = _merge(settings, session, table)
    after = io_counters()

    assert out["state"] == "succeeded", out
    assert out["rows_in"] == out["rows_out"] == rows_before
    assert second_reader_checksum(table) == (rows_before, checksum_before)
    groups = _groups(settings, action_id)
    assert len(groups) == 8 and {g["engine"] for g in groups} == {"spark"}
    executors = {g["executor"] for g in groups}
    assert len(executors) >= 2, executors
    assert len(cluster.executor_pids()) == 2
    assert {int(e.rsplit(":", 1)[1]) for e in executors} <= set(cluster.executor_pids())
    rewritten = sum(g["bytes_in"] for g in groups)
    read = after["rchar"] - before["rchar"]
    print(f"\nrewrote {rewritten} bytes on {len(executors)} executors; this process read {read} bytes "
          f"(rchar, {read / rewritten:.2%}), {after['read_bytes'] - before['read_bytes']} from disk")
    assert read <= 0.01 * rewritten, (read, rewritten)
    assert len(live_files(table)) == 8
    assert action_outputs(table) == set(f.removeprefix("file://") for f in live_files(table))
