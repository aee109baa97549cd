"""The default engine on a real Spark standalone cluster (master, two workers, a Connect server against
them; tests/integration/cluster.py): the groups run on both executors, whose Python does not have our
package installed, and the process that runs the action reads next to none of the bytes rewritten."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType, LongType, NestedField, StringType

from autooptimize.iceberg.checksum import table_checksum
from autooptimize.services import actions, tracking
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import get_action
from tests.integration.tables import action_outputs, identifier, live_files, second_reader_checksum

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

_names = itertools.count()
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "part", StringType(), required=True),
                NestedField(3, "k", LongType(), required=False), NestedField(4, "payload", BinaryType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("part", pa.string(), False), pa.field("k", pa.int64()),
                   pa.field("payload", pa.binary())])


def rows_of(first: int, count: int, part: str, rng: random.Random, shuffled: bool = False) -> pa.Table:
    ids = list(range(first, first + count))
    if shuffled:  # every file spans the partition's ids: a sort has overlapping files to fix
        ids = [first + rng.randrange(10 * count) for _ in range(count)]
    return pa.table({"id": ids, "part": [part] * count, "k": [rng.randrange(1 << 40) for _ in range(count)],
                     "payload": [rng.randbytes(1000) for _ in range(count)]}, schema=ARROW)


def make_table(catalog, partitions: int, files: int, file_bytes: int, name: str, shuffled: bool = False):
    """``partitions`` partitions of ``files`` files each of about ``file_bytes`` of incompressible payload,
    written in ONE commit (one manifest: the metadata the worker reads stays small beside the data)."""
    table = catalog.create_table(f"test.{name}_{next(_names)}", schema=SCHEMA, partition_spec=SPEC,
                                 properties={"write.target-file-size-bytes": str(file_bytes)})
    rng = random.Random(len(name) * 7919 + partitions)
    per_file = max(1, file_bytes // 1040)
    pieces = [rows_of((p * files + f) * per_file, per_file, f"p{p}", rng, shuffled)
              for p in range(partitions) for f in range(files)]
    table.append(pa.concat_tables(pieces))
    return table


def measured(run, meter: Path | None = None):
    """``run()`` and the bytes this process read meanwhile: rchar (files; read() on sockets) plus, with an
    S3 store, what the S3 server sent to this process through the relay (HTTP clients read with recv(),
    which rchar does not count)."""
    before, sent = io_counters(), _sent(meter)
    out = run()
    return out, io_counters()["rchar"] - before["rchar"] + _sent(meter) - sent


def _sent(meter: Path | None) -> int:
    return json.loads(meter.read_text())["to_watched"] if meter is not None else 0


def assert_moved_no_data(read: int, groups: list[dict], what: str) -> None:
    rewritten = sum(g["bytes_in"] for g in groups)
    print(f"\n{what}: rewrote {rewritten} bytes; this process read {read} ({read / max(1, rewritten):.2%})")
    assert read <= 0.01 * rewritten, (what, read, rewritten)


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
    """The route docs/engines.md documents is the only way our code reaches the executors; their Python
    workers allocate Arrow memory from the pool the server's conf names (spark.executorEnv)."""
    from tests.integration.cluster import session_for

    fresh = session_for(spark_cluster.server.info.remote)  # a session that never had the artifact

    def probe(batches):
        import importlib.util
        import sys

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"python": sys.executable, "path": ":".join(sys.path),
                                               "ours": importlib.util.find_spec("autooptimize") is not None,
                                               "pool": pa.default_memory_pool().backend_name}])

    try:
        rows = fresh.range(0, 2, 1, 2).mapInArrow(
            probe, "python string, path string, ours boolean, pool string").collect()
    finally:
        fresh.stop()
    assert rows and all(".venv" not in r["python"] for r in rows), rows
    assert {r["pool"] for r in rows} == {"system"}, rows
    # a Python worker reused after another session's tasks keeps that session's artifact on its path
    assert all(not r["ours"] or "autooptimize-" in r["path"] for r in rows), rows


def test_merge_of_eight_groups_runs_on_both_executors_and_the_worker_moves_no_data(settings, spark_cluster,
                                                                                    catalog):
    session, cluster = spark_cluster.session, spark_cluster.cluster
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


def pq_ids(table, path: str) -> list[int]:
    import pyarrow.parquet as pq

    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream, columns=["id"])["id"].to_pylist()


def _executors(groups: list[dict]) -> set[str]:
    assert {g["engine"] for g in groups} == {"spark"}, groups
    return {g["executor"] for g in groups}


@dataclass
class Store:
    """Where a test's tables live: the session's file:// catalog, or an s3:// one behind the meter."""

    name: str
    settings: Any
    catalog: Any
    meter: Path | None = None

    def measured(self, run):
        return measured(run, self.meter)


@pytest.fixture(params=["file", "s3"])
def store(request, settings, catalog) -> Store:
    if request.param == "file":
        return Store("file", settings, catalog)
    s3 = request.getfixturevalue("s3_apart")
    return Store("s3", s3.settings, s3.catalog, s3.meter)


def test_sort_and_zorder_run_on_the_executors(store, spark_cluster):
    settings, catalog, session = store.settings, store.catalog, spark_cluster.session
    for kind, options in (("sort", None), ("zorder", {"zorder_columns": "id,k"})):
        # the first action of a kind imports its modules (rchar counts those reads): a small one goes first
        for file_bytes, target in ((64 << 10, "64KiB"), (2 << 20, "2MiB")):
            table = make_table(catalog, partitions=2, files=4, file_bytes=file_bytes, name=f"cluster_{kind}",
                               shuffled=True)
            ident = identifier(table)
            tracking.track(settings, ident, target_file_size=target, sort_order="id" if kind == "sort" else None)
            rows_before, checksum_before = second_reader_checksum(table)
            action_id = actions.submit(settings, ident, kind=kind, dispatch=False, options=options)
            out, read = store.measured(lambda a=action_id: actions.execute(settings, a, spark=session))
            assert out["state"] == "succeeded", out
            assert second_reader_checksum(table) == (rows_before, checksum_before)
            groups = _groups(settings, action_id)
            assert len(groups) >= 2 and len(_executors(groups)) >= 1
        assert_moved_no_data(read, groups, f"{kind} on {store.name}")


def test_delete_compaction_with_position_and_equality_deletes_runs_on_the_executors(store, spark_cluster):
    from tests.integration.deletes import (
        data_files,
        delete_equal,
        delete_files,
        delete_positions,
        reference_checksum,
    )

    settings, catalog, session = store.settings, store.catalog, spark_cluster.session
    for file_bytes in (64 << 10, 2 << 20):  # a small one first: the first action of a kind imports its modules
        table = make_table(catalog, partitions=2, files=3, file_bytes=file_bytes, name="cluster_deletes")
        p0, p1 = data_files(table, "part=p0"), data_files(table, "part=p1")
        delete_positions(table, {p0[0]: range(0, 40, 3), p0[1]: [0, 5]})
        p1_ids = pq_ids(table, p1[0])
        delete_equal(table, p1[0], ["id"], [{"id": i} for i in p1_ids[:30]] + [{"id": -1}])
        expected = reference_checksum(table)
        ident = identifier(table)
        tracking.track(settings, ident, target_file_size="8MiB")
        action_id = actions.submit(settings, ident, kind="compact_deletes", dispatch=False)
        out, read = store.measured(lambda a=action_id: actions.execute(settings, a, spark=session))
        assert out["state"] == "succeeded", out
        assert delete_files(table) == []
        assert table_checksum(table) == expected
        groups = _groups(settings, action_id)
        assert len(groups) == 2 and all(g["rows_deleted"] > 0 for g in groups), groups
        _executors(groups)
    assert_moved_no_data(read, groups, f"compact_deletes on {store.name}")


def test_consolidation_of_buffered_files_runs_on_an_executor(store, spark_cluster, tmp_path):
    import pyarrow.parquet as pq

    from autooptimize.services.buffer import landing
    from autooptimize.services.buffer.consolidate import consolidate_table
    from tasks.send import CeleryDispatch

    settings, catalog, session = store.settings, store.catalog, spark_cluster.session
    for rows in (50, 2000):  # a small one first: the first consolidation imports its modules
        table = catalog.create_table(f"test.cluster_buffer_{next(_names)}", schema=SCHEMA, partition_spec=SPEC)
        ident = identifier(table)
        rng = random.Random(rows)
        files = []
        for i in range(6):
            path = tmp_path / f"in-{rows}-{i}.parquet"
            pq.write_table(rows_of(i * rows, rows, f"p{i % 2}", rng), path)
            files.append(path)
        landed = landing.land(settings, ident, files, dispatch=CeleryDispatch(settings))
        assert len(landed["landed"]) == 6
        size = sum(p.stat().st_size for p in files)
        out, read = store.measured(lambda i=ident: consolidate_table(settings, i, dispatch=CeleryDispatch(settings),
                                                                     spark=session, flush=True))
        assert [b["state"] for b in out["batches"]] == ["done"], out
        b = out["batches"][0]
        assert b["rows_in"] == b["rows_out"] == 6 * rows and b["checksum_in"] == b["checksum_out"]
    assert_moved_no_data(read, [{"bytes_in": size}], f"consolidation on {store.name}")


@dataclass
class S3Apart:
    settings: Any
    catalog: Any
    meter: Path


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all held open while chosen, so two calls cannot return the same one)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@pytest.fixture(scope="module")
def s3_apart(settings, tmp_path_factory):
    """An S3-protocol server (moto) in a process of its own, reached through the byte meter
    (tests/integration/socket_meter.py) that counts what it serves this process; yields the service's
    settings with a catalog on ``s3://``, that catalog, and the meter's counts file."""
    import boto3
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from autooptimize.iceberg.catalog import get_catalog

    port, relay = _free_ports(2)
    counts = tmp_path_factory.mktemp("meter") / "counts.json"
    server = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    meter = subprocess.Popen([sys.executable, "-m", "tests.integration.socket_meter", str(relay), str(port),
                              str(os.getpid()), str(counts)], cwd=Path(__file__).resolve().parents[2])
    try:
        props = {"s3.endpoint": f"http://127.0.0.1:{relay}", "s3.access-key-id": "cluster-test",
                 "s3.secret-access-key": "cluster-test-secret", "s3.region": "us-east-1",
                 "s3.path-style-access": "true"}
        client = boto3.client("s3", endpoint_url=props["s3.endpoint"], aws_access_key_id="cluster-test",
                              aws_secret_access_key="cluster-test-secret", region_name="us-east-1")
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket="clusterlake")
                break
            except Exception as exc:
                exited = {name: p.returncode for name, p in (("moto_server", server), ("meter", meter))
                          if p.poll() is not None}
                assert not exited and time.monotonic() < deadline, f"S3 server or meter not up: {exited} {exc!r}"
                time.sleep(0.3)
        assert json.loads(counts.read_text())["to_watched"] > 0, "the meter counted none of this process's bytes"
        env = {"TYPE": "sql", "URI": settings.database_url, "WAREHOUSE": "s3://clusterlake/wh"}
        env.update({key.replace(".", "__").upper(): value for key, value in props.items()})
        for key, value in env.items():
            os.environ[f"PYICEBERG_CATALOG__S3CLUSTER__{key}"] = value
        s3_settings = settings.model_copy(update={"catalog": "s3cluster"})
        catalog = get_catalog(s3_settings)
        try:
            catalog.create_namespace("test")
        except NamespaceAlreadyExistsError:
            pass
        yield S3Apart(s3_settings, catalog, counts)
    finally:
        for process in (meter, server):
            process.kill()
            process.wait(10)


def test_merge_on_s3_runs_on_the_executors(s3_apart, spark_cluster):
    settings, catalog = s3_apart.settings, s3_apart.catalog
    for file_bytes in (64 << 10, 2 << 20):  # a small one first: the first action on s3 imports its modules
        table = make_table(catalog, partitions=4, files=3, file_bytes=file_bytes, name="cluster_s3")
        assert table.location().startswith("s3://")
        rows_before, checksum_before = second_reader_checksum(table)
        ident = identifier(table)
        tracking.track(settings, ident, target_file_size="1GiB")
        action_id = actions.submit(settings, ident, dispatch=False)
        others = json.loads(s3_apart.meter.read_text())["to_others"]
        out, read = measured(lambda a=action_id: actions.execute(settings, a, spark=spark_cluster.session),
                             s3_apart.meter)
        assert out["state"] == "succeeded", out
        assert second_reader_checksum(table) == (rows_before, checksum_before)
        groups = _groups(settings, action_id)
        assert len(groups) == 4
    assert len(_executors(groups)) >= 2
    # the executors read every input byte through the same S3 server: the meter saw them
    served_others = json.loads(s3_apart.meter.read_text())["to_others"] - others
    assert served_others >= sum(g["bytes_in"] for g in groups), (served_others, groups)
    assert_moved_no_data(read, groups, "merge on s3")
