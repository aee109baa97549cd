"""Which path rewrites a merge group (services/rewrite/engine.py)."""

from __future__ import annotations

import dataclasses

import pytest

from autooptimize.domain.actions import Engine, MergeRequest
from autooptimize.services.rewrite.engine import choose_engine

MiB = 1024 * 1024
BASE = MergeRequest(action_id="a", identifier="db.t", spec_id=None, partition_key=None, target_file_size=128 * MiB,
                    tolerance=0, min_input_files=2, max_bytes=None, checkpoint=None, arrow_group_bytes=64 * MiB)


def choose(engine: str, group: int, *, spark_can: bool = True, local: bool = True, ordered: bool = False,
           arrow_sortable: bool = False) -> Engine:
    return choose_engine(dataclasses.replace(BASE, engine=engine), group, spark_can=spark_can, local=local,
                         ordered=ordered, arrow_sortable=arrow_sortable)


def test_auto_takes_the_pyarrow_path_for_a_local_group_up_to_the_limit_and_spark_above() -> None:
    assert choose("auto", 64 * MiB) == Engine.ARROW
    assert choose("auto", 64 * MiB + 1) == Engine.SPARK


@pytest.mark.parametrize("engine", ["auto", "spark", "arrow", "arrow_on_spark"])
def test_a_table_on_an_object_store_always_runs_as_a_spark_task(engine: str) -> None:
    assert choose(engine, 1, local=False) == Engine.ARROW_ON_SPARK


@pytest.mark.parametrize("engine", ["auto", "spark"])
def test_types_spark_cannot_write_take_the_pyarrow_path_whatever_the_setting(engine: str) -> None:
    assert choose(engine, 10 * 1024 * MiB, spark_can=False) == Engine.ARROW


def test_a_sorted_group_takes_the_pyarrow_path_only_when_its_keys_allow_and_it_is_small() -> None:
    assert choose("arrow", 1, ordered=True) == Engine.SPARK  # keys the pyarrow path cannot sort by
    assert choose("auto", 16 * MiB, ordered=True, arrow_sortable=True) == Engine.ARROW
    assert choose("auto", 16 * MiB + 1, ordered=True, arrow_sortable=True) == Engine.SPARK
    assert choose("spark", 1, ordered=True, arrow_sortable=True) == Engine.SPARK
    assert choose("auto", 1, ordered=True, arrow_sortable=True, local=False) == Engine.ARROW_ON_SPARK
    assert choose("auto", 1, ordered=True, local=False) == Engine.SPARK  # then refused: Spark cannot reach it


def test_the_setting_is_followed_where_it_can_be() -> None:
    assert choose("spark", 1) == Engine.SPARK
    assert choose("arrow", 10 * 1024 * MiB) == Engine.ARROW
    assert choose("arrow_on_spark", 1) == Engine.ARROW_ON_SPARK
