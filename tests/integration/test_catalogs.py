"""Catalogs: an unconfigured AO_CATALOG, errors that name the catalog's URI, the listener's polling path
forced on the SQL catalog, and every snippet of docs/catalogs.md's "Your lake" section (the SQL one creates a
table on an S3 server on loopback, the Spark ones talk to the test session's Spark Connect server)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.catalog.hive import HiveCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.utils.config import Config

from autooptimize.config import load_settings
from autooptimize.errors import ConfigError, ServiceUnavailable, TableNotFound
from autooptimize.iceberg.catalog import get_catalog, load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.services import tracking
from autooptimize.services.observe.changes import PollSchedule, changed_tables
from autooptimize.services.observe.roll import observe_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.stats import partition_figures
from scheduler.listener import run_listener
from tests.integration.tables import DAY1, DAY2, SCHEMA, SPEC, batch, identifier, make_table

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pyiceberg_home(tmp_path, monkeypatch) -> Path:
    """An empty pyiceberg configuration: no PYICEBERG_* variables, and .pyiceberg.yaml looked for only
    in fresh directories. Returns $PYICEBERG_HOME, where a test may write one."""
    for name in [n for n in os.environ if n.upper().startswith("PYICEBERG_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "pyiceberg"
    for d in (home, tmp_path / "home", tmp_path / "cwd"):
        d.mkdir()
    monkeypatch.setenv("PYICEBERG_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    return home


def _lake(settings, tmp_path: Path, name: str = "lake"):
    # AO_HOME is part of the catalog cache's key: each test opens its own catalog
    return settings.model_copy(update={"catalog": name, "home": tmp_path / "ao-home"})


# --- an unconfigured AO_CATALOG ------------------------------------------------------------------------

def test_an_unconfigured_catalog_is_an_error_that_says_what_to_set(settings, pyiceberg_home, tmp_path):
    with pytest.raises(ConfigError) as err:
        get_catalog(_lake(settings, tmp_path, "nowhere"))
    message = str(err.value)
    assert "AO_CATALOG='nowhere'" in message and ".pyiceberg.yaml" in message
    assert "PYICEBERG_CATALOG__NOWHERE__URI" in message and "unset AO_CATALOG" in message
    assert not (tmp_path / "ao-home").exists()  # nothing made: no empty SqlCatalog, no warehouse

    # the built-in name needs no configuration
    assert isinstance(get_catalog(_lake(settings, tmp_path, "autooptimize")), SqlCatalog)


def test_the_cli_exits_2_naming_the_missing_catalog(settings, catalog, tmp_path):
    table = make_table(catalog, {DAY1: 1}, name="cli")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PYICEBERG_")}
    env.update(AO_CATALOG="nowhere", PYICEBERG_HOME=str(tmp_path), HOME=str(tmp_path), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "autooptimize.cli", "track", identifier(table)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "AO_CATALOG='nowhere' names a catalog with no configuration" in done.stderr
    assert "Traceback" not in done.stderr


# --- errors name the catalog's URI, never a password ----------------------------------------------------

def test_an_unreachable_sql_catalog_is_named_by_its_uri_without_the_password(settings, pyiceberg_home, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__PGDOWN__URI", "postgresql+psycopg2://ao:hunter2-secret@127.0.0.1:1/cat")
    with pytest.raises(ServiceUnavailable) as err:
        get_catalog(_lake(settings, tmp_path, "pgdown"))
    message = str(err.value)
    assert "'pgdown' (sql catalog at postgresql+psycopg2://ao@127.0.0.1:1/cat)" in message
    assert "hunter2" not in message and settings.database_url not in message


def test_an_unreachable_rest_catalog_is_named_by_its_uri_without_its_credential(settings, pyiceberg_home, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__RESTDOWN__URI", "http://127.0.0.1:1/api?token=query-secret")
    monkeypatch.setenv("PYICEBERG_CATALOG__RESTDOWN__CREDENTIAL", "client:oauth-secret")
    with pytest.raises(ServiceUnavailable) as err:
        get_catalog(_lake(settings, tmp_path, "restdown"))
    message = str(err.value)
    assert "'restdown' (rest catalog at http://127.0.0.1:1/api)" in message
    assert "secret" not in message and "postgresql" not in message


def test_a_missing_catalog_client_names_the_extra_to_install(settings, pyiceberg_home, tmp_path, monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__HMS__URI", "thrift://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "pyiceberg.catalog.hive", None)  # as if thrift were not installed
    with pytest.raises(ConfigError, match=re.escape("install autooptimize's 'hive' extra (pip install 'autooptimize[hive]'")):
        get_catalog(_lake(settings, tmp_path, "hms"))


def test_a_missing_table_names_the_catalog(settings, catalog):
    with pytest.raises(TableNotFound, match=r"does not exist in catalog 'autooptimize' \(sql catalog at postgresql"):
        load_table(settings, "test.no_such_table")


# --- the listener's polling path, forced on the SQL catalog ---------------------------------------------

def _stored(settings, table_id: int) -> dict[tuple[int, str], tuple[int, int]]:
    with session_scope(settings) as s:
        return {k: (f.n_files, f.total_bytes) for k, f in partition_figures(s, table_id).items()}


def _exact(table) -> dict[tuple[int, str], tuple[int, int]]:
    table.refresh()
    return {k: (len(pf.data_files), sum(f.size for f in pf.data_files))
            for k, pf in live_partitions(table).items() if pf.data_files}


def _cursor_at(settings, table_id: int, snapshot_id: int) -> bool:
    with session_scope(settings) as s:
        cursor = s.get(TableCursor, table_id)
        return cursor is not None and cursor.last_snapshot_id == snapshot_id


def test_forced_polling_lists_every_tracked_table_and_the_listener_sees_a_writers_commits(settings, catalog):
    polling = settings.model_copy(update={"force_polling": True})
    table = make_table(catalog, {DAY1: 2}, name="poll")
    name = identifier(table)
    table_id = int(tracking.track(settings, name, target_file_size=4000, tolerance=1000)["id"])
    observe_table(settings, name)
    # nothing changed: the SQL query leaves the table out, polling lists it (observe_table then decides)
    assert name not in changed_tables(settings)
    assert name in changed_tables(polling, poll=PollSchedule(min_interval=0, max_per_call=100_000))

    stop = threading.Event()
    seen: list[tuple[int, int, str]] = []
    listener = threading.Thread(target=run_listener, args=(polling, stop, 0.05, lambda *a: seen.append(a)),
                                kwargs={"poll": PollSchedule(min_interval=0.2, max_per_call=100_000)}, daemon=True)
    writer_table = catalog.load_table(name)  # the writer's own handle, as another process would have
    listener.start()
    try:
        for i in range(6):
            writer_table.append(batch(10_000 + 100 * i, 30, DAY2 if i % 2 else DAY1))
            time.sleep(0.1)
        last = writer_table.current_snapshot().snapshot_id
        deadline = time.monotonic() + 60
        while not _cursor_at(settings, table_id, last):
            assert time.monotonic() < deadline, "the polling listener did not reach the writer's last commit"
            time.sleep(0.1)
    finally:
        stop.set()
        listener.join(30)
    assert not listener.is_alive()
    assert _stored(settings, table_id) == _exact(table)
    assert any(t == table_id for t, _, _ in seen)  # small files over the target: handed to decide


# --- docs/catalogs.md's "Your lake" snippets -----------------------------------------------------------------

def _your_lake() -> str:
    text = (REPO / "docs" / "catalogs.md").read_text()
    start = text.index("\n## Your lake\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _snippets(lang: str) -> list[tuple[str, str]]:
    """(the ### heading above it, body) of every ``lang`` block in the section."""
    found, heading = [], ""
    for match in re.finditer(r"^### ([^\n]*)$|^```(\w+)\n(.*?)^```$", _your_lake(), re.M | re.S):
        if match.group(1) is not None:
            heading = match.group(1)
        elif match.group(2) == lang:
            found.append((heading, match.group(3)))
    return found


def _yaml_snippet(kind: str) -> tuple[str, str]:
    """The one YAML snippet whose ``lake`` catalog is of ``kind``, as pyiceberg infers it."""
    chosen = []
    for heading, body in _snippets("yaml"):
        lake = yaml.safe_load(body)["catalog"]["lake"]
        uri = str(lake.get("uri", ""))
        inferred = lake.get("type") or ("rest" if uri.startswith("http") else "hive" if uri.startswith("thrift") else "")
        if inferred == kind:
            chosen.append((heading, body))
    assert len(chosen) == 1, f"expected one {kind} snippet in 'Your lake', found {len(chosen)}"
    return chosen[0]


def _configure(home: Path, body: str) -> dict[str, Any]:
    (home / ".pyiceberg.yaml").write_text(body)
    loaded = Config().get_catalog_config("lake")  # pyiceberg's own loader reads what was written
    assert loaded, body
    return dict(loaded)


def test_every_extra_the_section_installs_exists():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ((_, body),) = [s for s in _snippets("bash") if "pip install" in s[1]]
    named = re.findall(r"-e '\.\[([^\]]+)\]'", body)[0].split(",")
    assert named and set(named) <= set(extras)
    for name in ("rest", "glue", "hive", "sql"):
        assert name in extras and f"`{name}`" in _your_lake()


def test_the_rest_snippet_loads_and_an_absent_server_is_named_by_its_uri(settings, pyiceberg_home, tmp_path):
    _, body = _yaml_snippet("rest")
    props = _configure(pyiceberg_home, body)
    assert props["uri"] == "http://localhost:8181" and props["warehouse"].startswith("s3://")
    with pytest.raises(ServiceUnavailable, match=re.escape("'lake' (rest catalog at http://localhost:8181)")):
        get_catalog(_lake(settings, tmp_path))


def test_the_variables_snippet_configures_the_same_rest_catalog(pyiceberg_home, monkeypatch):
    _, body = _yaml_snippet("rest")
    from_file = yaml.safe_load(body)["catalog"]["lake"]
    ((_, exports),) = [s for s in _snippets("bash") if "PYICEBERG_CATALOG__LAKE__URI" in s[1]]
    for line in exports.splitlines():
        words = shlex.split(line, comments=True)
        for word in words[1:] if words[:1] == ["export"] else []:
            variable, _, value = word.partition("=")
            monkeypatch.setenv(variable, "x" if value == "…" else value)
    assert Config().get_catalog_config("lake") == {k: str(v) for k, v in from_file.items()}
    assert load_settings().catalog == "lake"


def test_the_glue_snippet_is_marked_as_needing_an_aws_account_and_loads(settings, pyiceberg_home, tmp_path):
    heading, body = _yaml_snippet("glue")
    assert "needs an AWS account" in heading
    _configure(pyiceberg_home, body)
    assert isinstance(get_catalog(_lake(settings, tmp_path)), GlueCatalog)  # no call to AWS yet


def test_the_hive_snippet_loads(settings, pyiceberg_home, tmp_path):
    _, body = _yaml_snippet("hive")
    props = _configure(pyiceberg_home, body)
    assert props["uri"].startswith("thrift://")
    assert isinstance(get_catalog(_lake(settings, tmp_path)), HiveCatalog)  # connects on first use only


@pytest.fixture(scope="module")
def s3_endpoint():
    """An S3 server on loopback (moto's server mode) with the bucket the snippets use."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    pafs.S3FileSystem(access_key="testing", secret_key="testing", endpoint_override=endpoint, scheme="http", allow_bucket_creation=True,
                      region="us-east-1").create_dir("warehouse")
    yield endpoint
    server.stop()


def test_the_sql_snippet_creates_a_table_on_s3(settings, pyiceberg_home, tmp_path, monkeypatch, s3_endpoint):
    _, body = _yaml_snippet("sql")
    lake = yaml.safe_load(body)["catalog"]["lake"]
    assert lake["uri"].startswith("postgresql+psycopg2://") and lake["warehouse"] == "s3://warehouse/"
    # the snippet as written, pointed at this session's database and S3 server; keys from the AWS variables
    body = body.replace(lake["uri"], settings.database_url).replace(lake["s3.endpoint"], s3_endpoint)
    _configure(pyiceberg_home, body)
    for variable, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(variable, value)
    lake_settings = _lake(settings, tmp_path)
    cat = get_catalog(lake_settings)
    assert isinstance(cat, SqlCatalog)
    cat.create_namespace_if_not_exists("yourlake")
    table = cat.create_table("yourlake.events", schema=SCHEMA, partition_spec=SPEC)
    for i in range(3):
        table.append(batch(100 * i, 40, DAY1))
    loaded = load_table(lake_settings, "yourlake.events")
    assert loaded.metadata_location.startswith("s3://warehouse/")
    assert loaded.scan().to_arrow().num_rows == 120
    assert all(f.file.file_path.startswith("s3://warehouse/") for f in loaded.scan().plan_files())


def test_the_remote_spark_snippet_makes_a_tls_url_with_the_token():
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    from autooptimize.config import Settings
    from spark_actors.server import resolve_remote

    ((_, body),) = [s for s in _snippets("bash") if "AO_SPARK_REMOTE" in s[1]]
    remote = re.search(r"AO_SPARK_REMOTE=(\S+)", body).group(1)  # type: ignore[union-attr]
    builder = DefaultChannelBuilder(resolve_remote(Settings(spark_remote=remote, spark_token="a-token")))
    assert (builder.host, builder.secure, builder.token) == ("spark.example", True, "a-token")


@pytest.mark.spark
def test_a_spark_connect_server_on_loopback_takes_its_url_and_token(settings, spark_server):
    from pyspark.sql import SparkSession

    from spark_actors.server import ensure_local_server, resolve_remote

    info = ensure_local_server(settings)
    assert "AO_SPARK_REMOTE=sc://localhost:15002" in _your_lake()
    ours = settings.model_copy(update={"spark_remote": f"sc://localhost:{info.port}",
                                       "spark_token": SecretStr(info.token)})
    session = SparkSession.builder.remote(resolve_remote(ours)).create()
    try:
        assert session.range(5).count() == 5
    finally:
        session.stop()
    wrong = ours.model_copy(update={"spark_token": SecretStr("not-the-token")})
    refused = SparkSession.builder.remote(resolve_remote(wrong)).create()
    try:
        with pytest.raises(Exception, match="(?i)unauthenticated|token|auth"):  # noqa: B017
            refused.range(1).count()
    finally:
        refused.stop()
