"""The Spark Connect URL the service connects to carries AO_SPARK_TOKEN as one more parameter."""

from __future__ import annotations

import pytest
from pyspark.sql.connect.client.core import DefaultChannelBuilder

from autooptimize.config import Settings
from spark_actors.server import resolve_remote


@pytest.mark.parametrize(("remote", "expected"), [
    ("sc://spark.example:443", "sc://spark.example:443/;token=t0k"),
    ("sc://spark.example:443/", "sc://spark.example:443/;token=t0k"),
    ("sc://spark.example:443/;use_ssl=true", "sc://spark.example:443/;use_ssl=true;token=t0k"),
    ("sc://spark.example:443/;use_ssl=true;user_id=ao", "sc://spark.example:443/;use_ssl=true;user_id=ao;token=t0k"),
    ("sc://spark.example:443/;token=given", "sc://spark.example:443/;token=given"),
])
def test_the_token_is_appended_as_a_parameter(remote, expected):
    url = resolve_remote(Settings(spark_remote=remote, spark_token="t0k"))
    assert url == expected
    builder = DefaultChannelBuilder(url)  # pyspark's own parser accepts it and finds the token and TLS
    assert builder.host == "spark.example" and builder.secure
    assert builder.token == ("given" if "given" in remote else "t0k")


def test_without_a_token_the_url_is_left_alone():
    assert resolve_remote(Settings(spark_remote="sc://spark.example:15002")) == "sc://spark.example:15002"
