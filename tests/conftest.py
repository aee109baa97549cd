"""Test session set-up: a fresh PostgreSQL database, Redis db 13, an AO_HOME in a temp dir and one
local Spark Connect server for the whole session (all real services). Under pytest-xdist each worker is
such a session, with its own Redis databases and Spark Connect port (``tests.helpers.worker_index``)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid

from tests.helpers import WORKER_PORT_STRIDE, WORKER_REDIS_DBS, with_redis_db, worker_index

_RUN = uuid.uuid4().hex[:10]
_HOME = tempfile.mkdtemp(prefix="autooptimize-test-")
_OWNER = os.getpid()
# removed at exit too: pytest-xdist's controller process runs no test, and no `settings` fixture removes it
atexit.register(lambda: os.getpid() == _OWNER and shutil.rmtree(_HOME, ignore_errors=True))
os.environ.setdefault("AO_TEST_ADMIN_URL", "postgresql+psycopg2://postgres@localhost:5432/postgres")
os.environ["AO_DATABASE_URL"] = os.environ.get("AO_TEST_DATABASE_URL",
                                                f"postgresql+psycopg2://postgres@localhost:5432/ao_test_{_RUN}")
# Under pytest-xdist (`-n 2`) each worker is a session of its own: its own database and home (above), Redis
# database and Spark Connect server (here). AO_TEST_REDIS_URL and AO_SPARK_PORT are the first worker's.
_WORKER = worker_index()
_REDIS = os.environ.get("AO_TEST_REDIS_URL", "redis://localhost:6379/13")
os.environ["AO_REDIS_URL"] = with_redis_db(_REDIS, WORKER_REDIS_DBS[_WORKER][0]) if _WORKER else _REDIS
os.environ["AO_HOME"] = _HOME
os.environ.setdefault("AO_SPARK_REMOTE", "local")
os.environ["AO_SPARK_PORT"] = str(int(os.environ.get("AO_SPARK_PORT", "15012")) + WORKER_PORT_STRIDE * _WORKER)
os.environ.setdefault("AO_SPARK_DRIVER_MEMORY", "1g")
# The default merge policy (tiered) runs in every test that does not choose another: a test that asserts
# a bin-packing plan asks for it (the ``binpack`` fixture), as an operator would with AO_MERGE_POLICY.
os.environ.pop("PYICEBERG_HOME", None)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def settings():
    from autooptimize.config import get_settings
    from autooptimize.storage.db import upgrade

    s = get_settings()
    upgrade(s)
    import redis

    redis.Redis.from_url(s.redis_url).flushdb()
    yield s
    if s.spark_remote == "local":  # a server some test started without the spark fixture (an in-process
        from spark_actors.server import stop_local_server  # execute on the default engine) is this home's too
        from spark_actors.session import close_session

        close_session()
        stop_local_server(s)
    from sqlalchemy import create_engine

    from autooptimize.storage.db import _engines

    for engine in _engines.values():
        engine.dispose()
    from autooptimize.iceberg.catalog import _catalogs

    for catalog in _catalogs.values():
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
    if "AO_TEST_DATABASE_URL" not in os.environ:
        admin = create_engine(os.environ["AO_TEST_ADMIN_URL"], isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "ao_test_{_RUN}" WITH (FORCE)')
        admin.dispose()
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_server(settings):
    """One Spark Connect server for the whole run (local mode), stopped at the end."""
    from spark_actors.server import stop_local_server
    from spark_actors.session import close_session, get_session

    get_session(settings)
    yield
    close_session()
    if settings.spark_remote == "local":
        stop_local_server(settings)


@pytest.fixture
def binpack_settings(settings, monkeypatch):
    """The settings with the bin-packing merge policy (and AO_MERGE_POLICY=binpack for the processes the
    test starts), as an operator chooses it: for tests that assert the plan bin packing makes of a table
    just written (every partition live, where the default tiered policy waits)."""
    monkeypatch.setenv("AO_MERGE_POLICY", "binpack")
    return settings.model_copy(update={"merge_policy": "binpack"})


@pytest.fixture
def spark(settings, spark_server):
    """This process's session, health-checked: a test that restarts the server leaves a working one."""
    from spark_actors.session import get_session

    return get_session(settings)


@pytest.fixture(scope="session")
def catalog(settings):
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from autooptimize.iceberg.catalog import get_catalog

    cat = get_catalog(settings)
    try:
        cat.create_namespace("test")
    except NamespaceAlreadyExistsError:
        pass
    return cat


S3_CATALOG = "s3test"
S3_BUCKET = "lake"


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol server on loopback (moto's server mode, spoken to over HTTP like any store);
    yields the FileIO properties a catalog passes to pyiceberg and to the Spark workers."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    props = {"s3.endpoint": f"http://{host}:{port}", "s3.access-key-id": "autooptimize-test",
             "s3.secret-access-key": "autooptimize-test-secret", "s3.region": "us-east-1",
             "s3.path-style-access": "true"}
    boto3.client("s3", endpoint_url=props["s3.endpoint"], aws_access_key_id=props["s3.access-key-id"],
                 aws_secret_access_key=props["s3.secret-access-key"],
                 region_name=props["s3.region"]).create_bucket(Bucket=S3_BUCKET)
    yield props
    server.stop()


@pytest.fixture(scope="session")
def s3_settings(settings, s3_server):
    """The service's settings with AO_CATALOG naming a SQL catalog whose warehouse is ``s3://lake/wh``
    (configured the pyiceberg way, through PYICEBERG_CATALOG__S3TEST__* variables)."""
    env = {"TYPE": "sql", "URI": settings.database_url, "WAREHOUSE": f"s3://{S3_BUCKET}/wh"}
    env.update({key.replace(".", "__").upper(): value for key, value in s3_server.items()})  # s3.endpoint → S3__ENDPOINT
    for key, value in env.items():
        os.environ[f"PYICEBERG_CATALOG__{S3_CATALOG.upper()}__{key}"] = value
    return settings.model_copy(update={"catalog": S3_CATALOG})


@pytest.fixture(scope="session")
def s3_catalog(s3_settings):
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from autooptimize.iceberg.catalog import get_catalog

    cat = get_catalog(s3_settings)
    try:
        cat.create_namespace("test")
    except NamespaceAlreadyExistsError:
        pass
    return cat


@pytest.fixture(scope="session")
def iceberg_java(settings, catalog):
    """Iceberg's Java library (1.10.2 on Spark 3.5) in a driver process sharing the catalog: tables it
    creates are the service's tables (tests/integration/java_engine.py)."""
    from tests.integration.java_engine import JavaEngine, ensure_installed

    python = ensure_installed()
    engine = JavaEngine(python, settings.catalog, settings.database_url, settings.warehouse_dir.as_uri(),
                        python.parent.parent / "driver.log")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def spark_cluster(settings):
    """A Spark standalone master and two workers on 127.0.0.1 (one core, 1 GiB each) and a Spark Connect
    server whose master is that cluster (tests/integration/cluster.py). Yields (settings, session, cluster,
    server) as attributes of one object; a test that restarts the server replaces ``session``."""
    from pathlib import Path
    from types import SimpleNamespace

    from tests.integration.cluster import (
        ConnectServer,
        StandaloneCluster,
        base_python,
        session_for,
        site_packages,
    )

    home = Path(_HOME) / "cluster"
    cluster = StandaloneCluster(home / "standalone")
    server = ConnectServer(home / "connect")
    session = running = None
    try:
        cluster.start(workers=2)
        conf = {"spark.pyspark.python": base_python(), "spark.executorEnv.PYTHONPATH": site_packages(),
                "spark.executor.memory": "640m", "spark.executor.cores": "1", "spark.cores.max": "2",
                "spark.driver.host": "127.0.0.1", "spark.task.maxFailures": "4"}
        cluster_settings = settings.model_copy(update={"spark_master": cluster.master_url,
                                                       "spark_driver_memory": "1g",
                                                       "spark_port": settings.spark_port + 1,
                                                       "spark_server_conf": conf})
        server.start(cluster_settings)
        session = session_for(server.info.remote)
        running = SimpleNamespace(settings=cluster_settings, session=session, cluster=cluster, server=server)
        yield running
    finally:
        for opened in {session, getattr(running, "session", None)} - {None}:
            try:
                opened.stop()
            except Exception:
                pass
        server.stop()
        cluster.stop()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``live`` replay a workload for minutes against the clock: they run with AO_LIVE_TESTS=1
    (as the benchmarks do), not in every run of the suite, where a loaded machine would make them flaky."""
    if os.environ.get("AO_LIVE_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="a minutes-long live replay: run with AO_LIVE_TESTS=1")
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)
