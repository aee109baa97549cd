"""Which path rewrites a group (services/rewrite/engine.py)."""

from __future__ import annotations

import dataclasses

import pytest

from autooptimize.config import Settings
from autooptimize.domain.actions import ActionRequest, Engine
from autooptimize.services.rewrite.engine import choose_engine

MiB = 1024 * 1024
BASE = ActionRequest(action_id="a", identifier="db.t", spec_id=None, partition_key=None, target_file_size=128 * MiB,
                    tolerance=0, min_input_files=2, max_bytes=None, checkpoint=None)


def choose(engine: str, *, spark_can: bool = True, ordered: bool = False, arrow_sortable: bool = True) -> Engine:
    return choose_engine(dataclasses.replace(BASE, engine=engine), spark_can=spark_can, ordered=ordered,
                         arrow_sortable=arrow_sortable)


def test_the_default_engine_is_the_action_job_on_spark():
    assert Settings.model_fields["rewrite_engine"].default == "spark"
    assert choose(Settings.model_fields["rewrite_engine"].default) == Engine.SPARK


@pytest.mark.parametrize("engine", ["spark", "spark_sql", "local"])
def test_each_setting_is_what_runs_when_it_can(engine):
    assert choose(engine) == Engine(engine)


def test_spark_sql_where_spark_cannot_write_goes_to_the_executors_never_to_the_worker():
    assert choose("spark_sql", spark_can=False) == Engine.SPARK


@pytest.mark.parametrize("engine", ["spark", "spark_sql", "local"])
def test_a_sort_pyarrow_cannot_do_needs_spark_sql(engine):
    assert choose(engine, ordered=True, arrow_sortable=False) == Engine.SPARK_SQL
    assert choose(engine, ordered=True, arrow_sortable=True) == Engine(engine)


def test_old_engine_names_are_refused_with_the_valid_ones():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="spark_sql"):
        Settings(rewrite_engine="auto")
