"""How a catalog is named in messages, and what an unconfigured AO_CATALOG says (no service needed)."""

from __future__ import annotations

import os

import pytest

from autooptimize.config import Settings
from autooptimize.errors import ConfigError
from autooptimize.iceberg.catalog import BUILTIN_CATALOG, catalog_properties, describe_catalog, safe_uri


def test_the_builtin_catalog_is_ao_catalogs_default():
    assert Settings.model_fields["catalog"].default == BUILTIN_CATALOG


@pytest.mark.parametrize(("uri", "shown"), [
    ("http://rest:8181", "http://rest:8181"),
    ("postgresql+psycopg2://ao:pw@db:5432/lake", "postgresql+psycopg2://ao@db:5432/lake"),
    ("postgresql+psycopg2://ao:p@ss/w:rd@db:5432/lake", "postgresql+psycopg2://ao@db:5432/lake"),
    ("postgresql://:only-a-password@db/lake", "postgresql://db/lake"),
    ("postgresql://db/lake?password=pw&sslmode=require", "postgresql://db/lake"),
    ("https://user:tok@polaris.example/api/catalog#frag", "https://user@polaris.example/api/catalog"),
    ("thrift://a:9083, thrift://b:9083", "thrift://a:9083,thrift://b:9083"),
    ("sqlite:////var/lib/catalog.db", "sqlite:////var/lib/catalog.db"),
])
def test_a_catalog_uri_is_shown_without_password_query_or_fragment(uri, shown):
    assert safe_uri(uri) == shown


@pytest.mark.parametrize(("properties", "described"), [
    ({"uri": "http://rest:8181"}, "'lake' (rest catalog at http://rest:8181)"),
    ({"uri": "thrift://hms:9083"}, "'lake' (hive catalog at thrift://hms:9083)"),
    ({"type": "glue", "glue.region": "eu-west-1"}, "'lake' (glue catalog)"),
    ({"type": "SQL", "uri": "postgresql+psycopg2://u:pw@db/x"}, "'lake' (sql catalog at postgresql+psycopg2://u@db/x)"),
    ({"uri": "ftp://odd"}, "'lake' (unknown type catalog at ftp://odd)"),
])
def test_a_catalog_is_described_by_type_and_uri(properties, described):
    assert describe_catalog("lake", properties) == described


@pytest.fixture
def no_pyiceberg_config(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.upper().startswith("PYICEBERG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)


def test_an_unconfigured_name_says_which_variables_or_file_entry_to_write(no_pyiceberg_config, monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__OTHER__URI", "http://other:8181")
    with pytest.raises(ConfigError) as err:
        catalog_properties(Settings(catalog="my-lake"))
    message = str(err.value)
    assert "PYICEBERG_CATALOG__MY_LAKE__URI=http://rest:8181" in message
    assert "Configured catalogs: other." in message

    # pyiceberg reads '_' in a variable's name as '-': a name with '_' can only be written in the file
    with pytest.raises(ConfigError) as err:
        catalog_properties(Settings(catalog="my_lake"))
    assert "PYICEBERG_CATALOG__MY_LAKE__URI" not in str(err.value)
    assert "'catalog: {my_lake: {uri: http://rest:8181" in str(err.value)


def test_a_configured_name_and_the_builtin_one_give_their_properties(no_pyiceberg_config, monkeypatch, tmp_path):
    monkeypatch.setenv("PYICEBERG_CATALOG__MY_LAKE__URI", "http://rest:8181")  # the name "my-lake"
    assert catalog_properties(Settings(catalog="my-lake")) == {"uri": "http://rest:8181"}
    builtin = catalog_properties(Settings(catalog=BUILTIN_CATALOG, home=tmp_path))
    assert builtin["type"] == "sql" and builtin["warehouse"] == (tmp_path / "warehouse").as_uri()
